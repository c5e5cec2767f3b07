//! What a command prints on success: a line or table for people, or the same result as one JSON
//! document for scripts (`--json`). Commands return an [`Outcome`] instead of printing, so the
//! tests read what a script would.

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// A command's result in both forms.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The result for `--json` (`null` when the command has no result of its own).
    pub json: serde_json::Value,
    /// The result for people (may be empty).
    pub text: String,
}

impl Outcome {
    /// A result with its text rendering.
    pub fn new(value: &impl Serialize, text: impl Into<String>) -> anyhow::Result<Self> {
        Ok(Self {
            json: serde_json::to_value(value)?,
            text: text.into(),
        })
    }

    /// Text that is the same with `--json` (a completion script).
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            json: serde_json::Value::Null,
            text: text.into(),
        }
    }

    /// What goes to standard output.
    pub fn render(&self, json: bool) -> String {
        if json && !self.json.is_null() {
            // Pretty-printing a `Value` cannot fail.
            serde_json::to_string_pretty(&self.json).unwrap_or_default()
        } else {
            self.text.clone()
        }
    }

    /// Prints the result to standard output. A reader that went away (`| head`) is not an
    /// error worth a panic.
    pub fn print(&self, json: bool) {
        use std::io::Write as _;
        let rendered = self.render(json);
        if !rendered.is_empty() {
            drop(writeln!(
                std::io::stdout().lock(),
                "{}",
                rendered.trim_end_matches('\n')
            ));
        }
    }
}

/// A progress bar on standard error for a job of `length` steps, hidden when standard error is
/// not a terminal (scripts, CI logs, `2>file`).
pub fn progress(length: u64, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(length).with_message(message);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {human_pos}/{human_len} ({eta} left)")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
