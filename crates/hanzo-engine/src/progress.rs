//! Progress on a terminal: spinners, step bars and byte bars on stderr, hidden when stderr
//! is not a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A spinner on stderr when it is a terminal; hidden otherwise.
pub fn spinner(msg: &str) -> ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
    };
    bar.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid"));
    bar.set_message(msg.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(80));
    bar
}

/// A bar over `total` steps on stderr when it is a terminal.
pub fn bar(total: u64, msg: &str) -> ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(total)
    } else {
        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden())
    };
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {eta}")
            .expect("valid")
            .progress_chars("=> "),
    );
    bar.set_message(msg.to_string());
    bar
}

/// A transfer's bar (bytes, speed, ETA) on stderr when it is a terminal; `None` otherwise,
/// where the caller logs plain lines instead.
pub fn bytes(total: Option<u64>, msg: &str) -> Option<ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            )
            .expect("valid")
            .progress_chars("=> "),
        );
        bar.set_message(msg.to_string());
        bar
    })
}
