//! Terminal rendering shared by the commands: progress spinners, ages, JSON.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::progress::Progress;

/// A spinner on stderr, drawn only when stderr is a terminal.
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    pub fn new() -> Self {
        if !std::io::stderr().is_terminal() {
            return Spinner(None);
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"));
        bar.enable_steady_tick(Duration::from_millis(100));
        Spinner(Some(bar))
    }
}

impl Progress for Spinner {
    fn step(&self, message: &str) {
        if let Some(bar) = &self.0 {
            bar.set_message(message.to_owned());
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.finish();
    }
}

pub fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(Error::other)?;
    println!("{text}");
    Ok(())
}

/// "12s", "5m", "3h", "2d": the age of something created at `epoch_secs`.
pub fn age(epoch_secs: u64) -> String {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(epoch_secs);
    let s = now.saturating_sub(epoch_secs);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}
