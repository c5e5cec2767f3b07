//! The users import file (`email`, optional `name`): which rows are users to upsert, which are
//! refused and why (by line), and the limits of one file. The dashboard's Users page uploads it;
//! `flowctl bench csv` measures it.

use flow_common::db::users::NewUser;
use flow_domain::TextRule;

use crate::csv_lines::{self, record_line};
use crate::users as service;

/// Most rows of one import.
pub const MAX_IMPORT_ROWS: usize = 50_000;
/// Largest import file.
pub const MAX_IMPORT_BYTES: usize = 8 * 1024 * 1024;

/// A row the import refused.
pub struct ImportProblem {
    /// Line in the file.
    pub line: usize,
    /// The e-mail as written.
    pub email: String,
    /// What is wrong.
    pub message: String,
}

/// Reads `email` and optional `name` columns; valid rows to upsert, and the problems of the rest.
/// Every record counts toward the row limit, empty ones too, so the file is read no further.
pub fn parse_import(bytes: &[u8]) -> Result<(Vec<NewUser>, Vec<ImportProblem>), String> {
    let (mut reader, headers) = csv_lines::open(bytes)?;
    let position = |name: &str| {
        headers
            .iter()
            .position(|header| header.eq_ignore_ascii_case(name))
    };
    let email_column =
        position("email").ok_or("The file needs an `email` column (and optionally `name`).")?;
    let name_column = position("name");
    let mut users = Vec::new();
    let mut problems = Vec::new();
    for (index, record) in reader.records().enumerate() {
        if index >= MAX_IMPORT_ROWS {
            return Err(format!(
                "The file has more than {MAX_IMPORT_ROWS} rows; split it into several imports."
            ));
        }
        let record = match record {
            Ok(record) => record,
            Err(error) => {
                problems.push(ImportProblem {
                    line: record_line(bytes, error.position()),
                    email: String::new(),
                    message: format!("Not valid CSV: {error}"),
                });
                continue;
            }
        };
        if record.iter().all(str::is_empty) {
            continue;
        }
        let line = record_line(bytes, record.position());
        let email = record.get(email_column).unwrap_or("").to_owned();
        let name = name_column
            .and_then(|column| record.get(column))
            .filter(|name| !name.is_empty())
            .map(str::to_owned);
        if name
            .as_ref()
            .is_some_and(|name| name.chars().count() > TextRule::NAME.max_chars)
        {
            problems.push(ImportProblem {
                line,
                email,
                message: format!(
                    "The name is longer than {} characters.",
                    TextRule::NAME.max_chars
                ),
            });
            continue;
        }
        match service::check(Some(&email), name.as_deref(), "") {
            Ok(user) => users.push(user),
            Err(invalid) => problems.push(ImportProblem {
                line,
                email,
                message: format!("Not imported: {invalid}."),
            }),
        }
    }
    Ok((users, problems))
}
