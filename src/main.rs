//! msgbench: the binary is glue. Parsing lives in `cli`, each subcommand in `cmd`, the choice of
//! driver in `registry`; all behaviour is in the library crates under `crates/`.

mod cli;
mod cmd;
#[cfg(test)]
mod docs_check;
mod live;
mod output;
mod registry;

use cli::args::Command;
use std::process::ExitCode;

// Producers allocate a buffer per message in most clients and consumers free it on another
// thread; mimalloc handles that cross-thread pattern far better than glibc's allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A file-size limit (RLIMIT_FSIZE) would otherwise kill the process with SIGXFSZ, without
    // a report; ignored, the write fails with EFBIG like a full disk and the run stops cleanly.
    // SAFETY: setting a signal's disposition to SIG_IGN before any thread exists.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    // No transparent huge pages: mimalloc asks for them, and each first touch of its heap then
    // makes the kernel zero 2 MiB. Growing per-client histograms and buffers touch fresh memory
    // all through a run, so that zeroing was ~5% of a 100-client MQTT run's CPU and ~35 MB of
    // its RSS (measured with MIMALLOC_ALLOW_THP=0; the in-process ceiling did not move).
    // SAFETY: a process-wide flag with no pointers; a kernel without it returns EINVAL, ignored.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    let cli = cli::args::parse();
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Search(a) => cmd::search::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Merge(a) => cmd::merge::run(a),
        Command::Drivers => Ok(cmd::drivers::run()),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Dashboard(a) => cmd::dashboard::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(if e.downcast_ref::<cmd::verdict::UsageError>().is_some() {
                cmd::verdict::EXIT_USAGE
            } else {
                cmd::verdict::EXIT_COULD_NOT_RUN
            })
        }
    }
}
