#!/usr/bin/env python3
"""A session of webdav4 (PyPI), a WebDAV client servery's authors did not write, against
a servery started with --dav --upload --allow-overwrite and several workers:

    webdav4_session.py BASE_URL ROOT_DIR

Folders made, files uploaded (a dot-file among them) and listed with their sizes and
tags, downloaded byte for byte, copied, moved, refused where they exist, and removed; after each write, ROOT_DIR is checked on disk. Each failure
names the step; the exit status says whether all passed."""

import hashlib
import io
import os
import sys

from webdav4.client import Client, ResourceAlreadyExists


def disk(root, rel):
    with open(os.path.join(root, rel), "rb") as f:
        return f.read()


def main():
    base, root = sys.argv[1].rstrip("/") + "/", sys.argv[2]
    client = Client(base, timeout=30)
    blob = os.urandom(3 * 1024 * 1024 + 7)

    client.mkdir("dir")
    assert client.isdir("dir"), "mkdir: not a folder"
    client.upload_fileobj(io.BytesIO(blob), "dir/blob.bin")
    client.upload_fileobj(io.BytesIO(b"secret=no\n"), "dir/.env.example")
    assert disk(root, "dir/blob.bin") == blob, "upload: not byte for byte on disk"

    listed = {os.path.basename(e["name"]): e for e in client.ls("dir", detail=True)}
    assert set(listed) == {"blob.bin", ".env.example"}, f"ls: {sorted(listed)}"
    assert listed["blob.bin"]["content_length"] == len(blob), listed["blob.bin"]
    assert listed["blob.bin"]["type"] == "file" and listed["blob.bin"]["etag"], listed["blob.bin"]
    info = client.info("dir/blob.bin")
    assert info["etag"] == client.etag("dir/blob.bin") == listed["blob.bin"]["etag"], info
    assert client.content_length("dir/blob.bin") == len(blob)
    assert client.modified("dir/blob.bin") is not None

    got = io.BytesIO()
    client.download_fileobj("dir/blob.bin", got)
    assert hashlib.sha256(got.getvalue()).digest() == hashlib.sha256(blob).digest(), \
        "download: not the uploaded bytes"
    with client.open("dir/blob.bin", mode="rb") as f:
        f.seek(1024 * 1024)
        assert f.read(16) == blob[1024 * 1024:1024 * 1024 + 16], "open + seek: wrong bytes"

    try:
        client.upload_fileobj(io.BytesIO(b"again"), "dir/blob.bin", overwrite=False)
        raise AssertionError("upload without overwrite over an existing file went through")
    except ResourceAlreadyExists:
        pass
    assert disk(root, "dir/blob.bin") == blob, "a refused upload changed the file"

    client.copy("dir/blob.bin", "dir/copy.bin")
    assert disk(root, "dir/copy.bin") == blob, "copy"
    client.mkdir("dir2")
    client.move("dir/copy.bin", "dir2/moved.bin")
    assert not os.path.exists(os.path.join(root, "dir/copy.bin")), "move left the source"
    assert disk(root, "dir2/moved.bin") == blob, "move"
    client.move("dir2", "dir3")
    assert client.isfile("dir3/moved.bin") and not client.exists("dir2"), "folder move"

    kind = client.content_type("dir/blob.bin")
    assert kind == "application/octet-stream", f"content type: {kind!r}"

    client.upload_fileobj(io.BytesIO(b"replaced"), "dir/blob.bin", overwrite=True)
    assert disk(root, "dir/blob.bin") == b"replaced", "overwrite"
    client.remove("dir")
    client.remove("dir3")
    assert not os.path.exists(os.path.join(root, "dir")) and not client.exists("dir3"), "remove"
    print("webdav4: all passed", flush=True)


if __name__ == "__main__":
    main()
