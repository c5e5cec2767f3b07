//! `flowctl bench csv`: how long the dashboard's users import takes to parse its largest files
//! (the parse alone, as the API runs it on its blocking pool; no database). Three files: the most
//! rows allowed of valid lines, the largest file of empty records (`,` lines, read up to the row
//! limit), and the largest file of blank lines (skipped by the CSV reader).

use std::time::{Duration, Instant};

use clap::Args;
use flow_app::user_import::{MAX_IMPORT_BYTES, MAX_IMPORT_ROWS, parse_import};

/// Options of the CSV benchmark.
#[derive(Debug, Clone, Args)]
pub struct CsvBenchArgs {
    /// Rows of the file of valid lines.
    #[arg(long, default_value_t = MAX_IMPORT_ROWS)]
    pub rows: usize,
    /// Times each file is parsed; the median and the slowest are printed.
    #[arg(long, default_value_t = 7)]
    pub runs: usize,
}

/// Builds the files and times their parse.
pub fn run(args: CsvBenchArgs) -> anyhow::Result<()> {
    let mut valid = String::from("email,name\n");
    for index in 0..args.rows {
        valid.push_str(&format!("person{index}@example.com,Person {index}\n"));
    }
    let filled = |line: &str| {
        let mut file = b"email,name\n".to_vec();
        while file.len() + line.len() <= MAX_IMPORT_BYTES {
            file.extend_from_slice(line.as_bytes());
        }
        file
    };
    let files = [
        (
            format!("{} rows of valid lines", args.rows),
            valid.into_bytes(),
        ),
        ("empty records (`,` lines)".to_owned(), filled(",\n")),
        ("blank lines".to_owned(), filled("\n")),
    ];
    println!("users import parse, {} runs each:", args.runs.max(1));
    for (name, file) in files {
        let mut times = Vec::new();
        let mut outcome = String::new();
        for _ in 0..args.runs.max(1) {
            let started = Instant::now();
            let parsed = parse_import(&file);
            times.push(started.elapsed());
            outcome = match parsed {
                Ok((users, problems)) => {
                    format!("{} users, {} problems", users.len(), problems.len())
                }
                Err(message) => format!("refused: {message}"),
            };
        }
        times.sort();
        let median = times[times.len() / 2];
        let slowest = times.last().copied().unwrap_or(Duration::ZERO);
        println!(
            "  {name:<34} {:>6.1} MiB  median {:>8.1} ms  slowest {:>8.1} ms  ({outcome})",
            file.len() as f64 / 1024.0 / 1024.0,
            median.as_secs_f64() * 1e3,
            slowest.as_secs_f64() * 1e3,
        );
    }
    Ok(())
}
