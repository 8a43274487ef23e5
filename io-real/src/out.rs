//! Writing to stdout and stderr without panicking: `println!` panics on a closed pipe, and
//! a supervisor whose output is piped into `head -1` must keep supervising.

use std::fmt;
use std::io::Write;

pub fn stdout_line(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}

pub fn stderr_line(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}
