//! CPython in the worker: the interpreter started once, the application imported while
//! the worker prepares, the liveness probe, and the WSGI calls ([`wsgi`]).

mod asgi;
mod deliveries;
mod environ;
mod websocket;
mod wsgi;

use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyList, PyModule, PyString, PyTuple};

use super::pool::{Pool, Scopes};
use super::{AppError, AppSpec};
use crate::clock::Clock;

pub(super) use asgi::{Asgi, LifespanMode};
pub(super) use wsgi::Wsgi;

/// How often the probe thread takes the interpreter's lock. The worker beats only while
/// the probe answered within two heartbeat intervals, so this must be well below the
/// shortest interval anyone sets; twenty acquisitions a second cost nothing measurable.
const PROBE_EVERY: Duration = Duration::from_millis(50);

/// The Python half of the adapter (PEP 3333's behaviour, in Python).
const SUPPORT_SOURCE: &str = include_str!("wsgi_support.py");

/// What loading gives the adapter: the application and the support module's pieces.
struct Loaded {
    app: Py<PyAny>,
    call: Py<PyAny>,
    input: Py<PyAny>,
    /// `wsgi.input` of every request without a body: a stream always at its end.
    empty_input: Py<PyAny>,
    base_environ: Py<PyDict>,
    repeated: environ::Repeated,
}

/// Starts the interpreter (once per process), imports the application and starts the
/// probe. Runs the application's module code: blocking.
fn load(spec: &AppSpec, clock: Clock, alive: &Arc<AtomicU64>) -> Result<Loaded, AppError> {
    Python::initialize();
    let failed = |detail: String| AppError::Load {
        target: spec.target.clone(),
        detail,
    };
    let loaded = Python::attach(|py| -> Result<Loaded, String> {
        let app = load_app(py, spec)?;
        let support = support_module(py).map_err(|e| describe(py, &e))?;
        let base_environ = base_environ(py, spec, &support).map_err(|e| describe(py, &e))?;
        let attr = |name: &str| {
            support
                .getattr(name)
                .map(Bound::unbind)
                .map_err(|e| describe(py, &e))
        };
        Ok(Loaded {
            app: app.unbind(),
            call: attr("call")?,
            input: attr("Input")?,
            empty_input: support
                .getattr("EmptyInput")
                .and_then(|empty| empty.call0())
                .map(Bound::unbind)
                .map_err(|e| describe(py, &e))?,
            base_environ: base_environ.unbind(),
            repeated: environ::Repeated::default(),
        })
    })
    .map_err(failed)?;
    start_probe(clock, Arc::clone(alive));
    Ok(loaded)
}

/// The application object, imported with `--app-dir` and the working directory in front
/// of `sys.path`; a failure as Python prints it.
fn load_app<'py>(py: Python<'py>, spec: &AppSpec) -> Result<Bound<'py, PyAny>, String> {
    prepend_paths(py, spec).map_err(|e| describe(py, &e))?;
    import(py, spec).map_err(|e| describe(py, &e))
}

/// A Python callable that writes its one argument to servery's log.
fn log_fn(py: Python<'_>) -> PyResult<Bound<'_, PyCFunction>> {
    PyCFunction::new_closure(
        py,
        Some(c"log"),
        None,
        |args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            let line: String = args.get_item(0)?.extract()?;
            tracing::warn!(target: "servery::app", "{line}");
            Ok(())
        },
    )
}

/// `--app-dir` entries in front of `sys.path`, then the working directory (as gunicorn
/// and uvicorn do, so `servery --wsgi app:app` finds `./app.py`).
fn prepend_paths(py: Python<'_>, spec: &AppSpec) -> PyResult<()> {
    let sys = PyModule::import(py, "sys")?;
    let path = sys.getattr("path")?.cast_into::<PyList>()?;
    let mut front: Vec<String> = spec
        .app_dirs
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    if let Ok(cwd) = std::env::current_dir() {
        front.push(cwd.to_string_lossy().into_owned());
    }
    for dir in front.into_iter().rev() {
        path.insert(0, dir)?;
    }
    Ok(())
}

/// The application object: `MODULE:NAME`, called when it is a factory.
fn import<'py>(py: Python<'py>, spec: &AppSpec) -> PyResult<Bound<'py, PyAny>> {
    let module = PyModule::import(py, spec.target.module.as_str())?;
    let mut app: Bound<'py, PyAny> = module.into_any();
    for part in spec.target.name.split('.') {
        app = app.getattr(part)?;
    }
    // With --app-factory, the error says which of the two was not callable.
    let refuse = |app: &Bound<'py, PyAny>, said: &str| -> PyResult<Bound<'py, PyAny>> {
        let kind = app.get_type().name()?;
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{}{said} a {kind}",
            spec.target
        )))
    };
    if spec.factory {
        if !app.is_callable() {
            return refuse(&app, " is not a factory to call (--app-factory): it is");
        }
        app = app.call0()?;
        if !app.is_callable() {
            return refuse(&app, "() returned no callable application: it returned");
        }
    } else if !app.is_callable() {
        return refuse(&app, " is not a callable application: it is");
    }
    Ok(app)
}

fn support_module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    let source = CString::new(SUPPORT_SOURCE)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    PyModule::from_code(py, &source, c"servery_wsgi.py", c"servery_wsgi")
}

/// The keys every request's environ starts with: the worker's constants, then the keys
/// each request sets ([`environ::PER_REQUEST`]).
fn base_environ<'py>(
    py: Python<'py>,
    spec: &AppSpec,
    support: &Bound<'py, PyModule>,
) -> PyResult<Bound<'py, PyDict>> {
    let environ = PyDict::new(py);
    environ.set_item("wsgi.version", PyTuple::new(py, [1, 0])?)?;
    environ.set_item("wsgi.multithread", spec.threads > 1)?;
    environ.set_item("wsgi.multiprocess", spec.multiprocess)?;
    environ.set_item("wsgi.run_once", false)?;
    environ.set_item("wsgi.input_terminated", true)?;
    environ.set_item("SCRIPT_NAME", "")?;
    let log = log_fn(py)?;
    let errors = support.getattr("Errors")?.call1((log,))?;
    environ.set_item("wsgi.errors", errors)?;
    environ.set_item("wsgi.file_wrapper", support.getattr("FileWrapper")?)?;
    // Every request's own keys too, with no value yet: a request's copy then has room for
    // them and for its headers, and setting one replaces a value instead of inserting a
    // key into a dict that grows on the way.
    for key in environ::PER_REQUEST {
        environ.set_item(PyString::intern(py, key), py.None())?;
    }
    Ok(environ)
}

/// An exception as Python prints it: the traceback, then the exception's own line.
fn describe(py: Python<'_>, err: &PyErr) -> String {
    let formatted = (|| -> PyResult<String> {
        let traceback = PyModule::import(py, "traceback")?;
        let value = err.value(py);
        let lines = traceback.getattr("format_exception")?.call1((
            value.get_type(),
            value,
            err.traceback(py),
        ))?;
        let lines: Vec<String> = lines.extract()?;
        Ok(lines.concat())
    })();
    match formatted {
        // The exception's line first (what `ctl status` shows of a startup failure),
        // then the whole traceback.
        Ok(text) => format!("{err}\n{}", text.trim_end()),
        Err(_) => err.to_string(),
    }
}

/// A thread that takes the interpreter's lock every [`PROBE_EVERY`] and notes when it got
/// it. It blocks exactly when a request holds the lock without letting go.
fn start_probe(clock: Clock, alive: Arc<AtomicU64>) {
    alive.store(clock.now().as_nanos(), Ordering::Release);
    let spawned = std::thread::Builder::new()
        .name("servery-app-probe".into())
        .spawn(move || {
            loop {
                Python::attach(|_py| ());
                alive.store(clock.now().as_nanos(), Ordering::Release);
                std::thread::sleep(PROBE_EVERY);
            }
        });
    if let Err(e) = spawned {
        // Without the probe the worker cannot say its application is alive: it goes
        // silent and is replaced, which is the safe side.
        tracing::error!(error = %e, "cannot start the application's liveness probe");
    }
}

/// When the interpreter last answered the probe, in the worker's clock.
fn last_alive(alive: &AtomicU64) -> Option<servery_core::Instant> {
    Some(servery_core::Instant::from_nanos(
        alive.load(Ordering::Acquire),
    ))
}

/// The answer to a request whose application raised (or gave nothing) before its response
/// started: the traceback is in the log, the client gets a plain 500.
fn internal_error() -> http::Response<crate::http::body::Body> {
    let mut r = http::Response::new(crate::http::body::full("Internal Server Error\n"));
    *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `Pool` sized for the spec, whose threads each keep one interpreter thread state for
/// their life: attached once, and released (`detach`) for everything but the calls, which
/// then re-take the lock with that state instead of making and dropping one each. A run of
/// back-to-back calls takes the lock once (decision 0049); each call still lets it go
/// whenever it waits.
fn pool(spec: &AppSpec) -> Pool {
    fn attached(run: &mut (dyn FnMut() + Send)) {
        Python::attach(|py| py.detach(run));
    }
    fn locked(run: &mut dyn FnMut()) {
        Python::attach(|_py| run());
    }
    Pool::with_scopes(
        spec.threads,
        Some(Scopes {
            thread: attached,
            batch: locked,
        }),
    )
}
