//! Forms and file uploads through the ASGI frameworks, against the real binary: Starlette
//! and FastAPI parsing a URL-encoded form and a multipart upload (python-multipart, as
//! both require), FastAPI's `StreamingResponse`, and Django's ASGI handler with a JSON
//! POST and a form with a file. Every upload is several MiB, so it arrives in many
//! `receive()` messages, and its SHA-256 is checked against the file curl sent.
//!
//! Requests go through curl. Each test says SKIPPED and passes when the interpreter the
//! binary embeds lacks the framework (scripts/test installs the pinned versions).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use servery_tests::serde_json::{Value, json};
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);

const STARLETTE_APP: &str = r#"
import hashlib
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def form(request):
    async with request.form() as form:
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        upload = form.get("file")
        digest = None
        if upload is not None and not isinstance(upload, str):
            h = hashlib.sha256()
            while chunk := await upload.read(65536):
                h.update(chunk)
            digest = {"filename": upload.filename, "sha256": h.hexdigest(),
                      "type": upload.content_type}
        return JSONResponse({"fields": fields, "file": digest})

app = Starlette(routes=[Route("/form", form, methods=["POST"])])
"#;

const FASTAPI_APP: &str = r#"
import hashlib
from typing import Annotated
from fastapi import FastAPI, File, Form, UploadFile
from fastapi.responses import StreamingResponse

app = FastAPI()

@app.post("/login")
async def login(username: Annotated[str, Form()], remember: Annotated[bool, Form()] = False):
    return {"username": username, "remember": remember}

@app.post("/upload")
async def upload(name: Annotated[str, Form()], file: Annotated[UploadFile, File()]):
    h, size = hashlib.sha256(), 0
    while chunk := await file.read(65536):
        h.update(chunk)
        size += len(chunk)
    return {"name": name, "filename": file.filename, "size": size, "sha256": h.hexdigest()}

@app.get("/report")
async def report(lines: int = 1000):
    async def rows():
        yield "n,square\n"
        for i in range(lines):
            yield "%d,%d\n" % (i, i * i)
    return StreamingResponse(rows(), media_type="text/csv")
"#;

fn available(modules: &[&str]) -> bool {
    python_imports(modules)
}

fn serve(tree: &Tree, target: &str) -> Server {
    let app_dir = tree.dir.join("app");
    let args = [
        FAST,
        &[
            "--asgi",
            target,
            "--app-dir",
            app_dir.to_str().expect("utf-8"),
        ],
    ]
    .concat();
    let server = Server::start(tree, 1, &args, &[]);
    server.wait_ready(1, BOUND);
    server
}

/// A file of `size` bytes of a pattern, and its SHA-256 as hex (from sha256sum).
fn upload_file(dir: &Path, size: usize) -> (PathBuf, String) {
    let path = dir.join("upload.bin");
    let content: Vec<u8> = (0..size).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(&path, content).expect("write the upload");
    let out = Command::new("sha256sum")
        .arg(&path)
        .output()
        .expect("sha256sum");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let hex = text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    (path, hex)
}

#[test]
fn starlette_parses_a_url_encoded_form_and_a_multipart_upload() {
    if !available(&["starlette", "python_multipart"]) {
        return;
    }
    let tree = python_app_tree("starletteforms", "forms", STARLETTE_APP);
    let server = serve(&tree, "forms:app");
    let got = curl_json(
        server.addr,
        "/form",
        &["--data-urlencode", "name=Zoë & co", "--data", "n=7"],
    );
    assert_eq!(
        got["fields"],
        json!({"name": "Zoë & co", "n": "7"}),
        "{got}"
    );
    assert_eq!(got["file"], Value::Null, "{got}");

    let (path, sha) = upload_file(&tree.dir, 5 << 20);
    let file_arg = format!("file=@{};type=application/x-test", path.display());
    let got = curl_json(
        server.addr,
        "/form",
        &["-F", "title=report", "-F", &file_arg],
    );
    assert_eq!(got["fields"], json!({"title": "report"}), "{got}");
    assert_eq!(got["file"]["filename"], "upload.bin", "{got}");
    assert_eq!(got["file"]["type"], "application/x-test", "{got}");
    assert_eq!(got["file"]["sha256"], sha.as_str(), "{got}");
}

#[test]
fn fastapi_takes_forms_and_uploads_and_streams_a_response() {
    if !available(&["fastapi", "python_multipart"]) {
        return;
    }
    let tree = python_app_tree("fastapiforms", "forms", FASTAPI_APP);
    let server = serve(&tree, "forms:app");
    let got = curl_json(
        server.addr,
        "/login",
        &["--data", "username=ada&remember=true"],
    );
    assert_eq!(got, json!({"username": "ada", "remember": true}));
    // A missing field is FastAPI's own 422, not a server error.
    let a = curl(server.addr, "/login", &["--data", "remember=true"]);
    assert_eq!(a.status, 422, "{}", String::from_utf8_lossy(&a.body));

    let size = 6 << 20;
    let (path, sha) = upload_file(&tree.dir, size);
    let file_arg = format!("file=@{}", path.display());
    let got = curl_json(server.addr, "/upload", &["-F", "name=six", "-F", &file_arg]);
    assert_eq!(got["name"], "six", "{got}");
    assert_eq!(got["filename"], "upload.bin", "{got}");
    assert_eq!(got["size"], size, "{got}");
    assert_eq!(got["sha256"], sha.as_str(), "{got}");

    let a = curl(server.addr, "/report?lines=20000", &[]);
    let want: String = std::iter::once("n,square\n".to_owned())
        .chain((0..20000u64).map(|i| format!("{i},{}\n", i * i)))
        .collect();
    assert_eq!(a.status, 200);
    assert!(
        a.body == want.as_bytes(),
        "the streamed CSV differs ({} bytes, want {})",
        a.body.len(),
        want.len()
    );
}

const DJANGO_SETTINGS: &str = r#"
SECRET_KEY = "servery-test-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "djforms.urls"
INSTALLED_APPS = []
MIDDLEWARE = []
DATABASES = {}
USE_TZ = True
# Uploads above 1 MiB are spooled to a temporary file, as in production.
FILE_UPLOAD_MAX_MEMORY_SIZE = 1 << 20
"#;

const DJANGO_URLS: &str = r#"
import hashlib, json
from django.http import JsonResponse
from django.urls import path

async def echo_json(request):
    data = json.loads(request.body)
    return JsonResponse({"got": data, "type": request.content_type})

def upload(request):
    f = request.FILES["file"]
    h = hashlib.sha256()
    for chunk in f.chunks():
        h.update(chunk)
    return JsonResponse({"title": request.POST.get("title"), "filename": f.name,
                         "size": f.size, "sha256": h.hexdigest(),
                         "spooled": hasattr(f, "temporary_file_path")})

def form(request):
    return JsonResponse({"fields": {k: request.POST.getlist(k) for k in request.POST}})

urlpatterns = [path("json", echo_json), path("upload", upload), path("form", form)]
"#;

const DJANGO_ASGI: &str = r#"
import os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djforms.settings")
from django.core.asgi import get_asgi_application
application = get_asgi_application()
"#;

#[test]
fn django_over_asgi_takes_json_forms_and_uploads() {
    if !available(&["django"]) {
        return;
    }
    let tree = Tree::new("django-asgi-forms");
    let package = tree.dir.join("app/djforms");
    std::fs::create_dir_all(&package).expect("package dir");
    for (name, text) in [
        ("__init__.py", ""),
        ("settings.py", DJANGO_SETTINGS),
        ("urls.py", DJANGO_URLS),
        ("asgi.py", DJANGO_ASGI),
    ] {
        std::fs::write(package.join(name), text).expect("write the project");
    }
    let server = serve(&tree, "djforms.asgi:application");
    let got = curl_json(
        server.addr,
        "/json",
        &[
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"a": [1, 2, "é"], "b": null}"#,
        ],
    );
    assert_eq!(got["got"], json!({"a": [1, 2, "é"], "b": null}), "{got}");
    assert_eq!(got["type"], "application/json", "{got}");

    let got = curl_json(server.addr, "/form", &["--data", "tag=a&tag=b&note=x%20y"]);
    assert_eq!(
        got["fields"],
        json!({"tag": ["a", "b"], "note": ["x y"]}),
        "{got}"
    );

    let size = 4 << 20;
    let (path, sha) = upload_file(&tree.dir, size);
    let file_arg = format!("file=@{}", path.display());
    let got = curl_json(
        server.addr,
        "/upload",
        &["-F", "title=quarterly", "-F", &file_arg],
    );
    assert_eq!(got["title"], "quarterly", "{got}");
    assert_eq!(got["filename"], "upload.bin", "{got}");
    assert_eq!(got["size"], size, "{got}");
    assert_eq!(got["sha256"], sha.as_str(), "{got}");
    assert_eq!(got["spooled"], true, "past 1 MiB, spooled to a file: {got}");
}
