//! A spinner on stderr for long steps, shown only when a person is watching: stdout and stderr
//! are terminals and `--json` is off.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress(Option<ProgressBar>);

impl Progress {
    pub fn new(json: bool) -> Progress {
        let watched = !json && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        if !watched {
            return Progress(None);
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress(Some(bar))
    }

    /// Shows what is being done now.
    pub fn stage(&self, msg: &str) {
        if let Some(bar) = &self.0 {
            bar.set_message(msg.to_string());
        }
    }

    /// Removes the spinner.
    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
