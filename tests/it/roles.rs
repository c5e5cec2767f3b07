//! The registry of worker roles (`flow_workers::roles::ALL`) is the one list: `flowctl up --only`
//! takes exactly its names (and `api`), and the lists the docs keep by hand — the README's table
//! of binaries, the ops addresses of docs/operations.md and docs/monitoring.md's example scrape
//! configuration — name exactly its roles, with their default ops addresses. (The deploy files
//! are checked against it in tests/it/compose.rs.)

use clap::{Parser as _, ValueEnum as _};
use flow_workers::roles::ALL;
use flowctl::up::Component;

fn repository_file(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn role_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = ALL.iter().map(|role| role.name).collect();
    names.sort_unstable();
    names
}

/// The first cells of the Markdown table whose header row is `header`, without backquotes.
fn first_column<'a>(document: &'a str, header: &str) -> Vec<&'a str> {
    document
        .lines()
        .skip_while(|line| !line.starts_with(header))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.split('|').nth(1))
        .map(|cell| cell.trim().trim_matches('`'))
        .collect()
}

#[test]
fn flowctl_up_only_takes_the_api_and_every_role_of_the_registry() {
    let values: Vec<&str> = Component::value_variants()
        .iter()
        .map(|component| component.name())
        .collect();
    let mut expected = vec!["api"];
    expected.extend(ALL.iter().map(|role| role.name));
    assert_eq!(values, expected);

    let every = expected.join(",");
    let cli = flowctl::Cli::try_parse_from(["flowctl", "up", "--only", &every]).expect(&every);
    let flowctl::Command::Up(args) = cli.command else {
        panic!("flowctl up");
    };
    assert_eq!(
        args.only
            .iter()
            .map(|component| component.name())
            .collect::<Vec<_>>(),
        expected
    );
    let unknown = flowctl::Cli::try_parse_from(["flowctl", "up", "--only", "api,mailer"])
        .err()
        .expect("an unknown component is refused");
    let message = unknown.to_string();
    assert!(message.contains("mailer"), "{message}");
    for name in &expected {
        assert!(
            message.contains(name),
            "the refusal lists {name}: {message}"
        );
    }
}

#[test]
fn the_readme_lists_every_role_of_the_registry_as_a_binary() {
    let readme = repository_file("README.md");
    let mut binaries: Vec<&str> = first_column(&readme, "| Binary | Role |")
        .into_iter()
        .filter(|binary| !["flow-api", "flowctl"].contains(binary))
        .collect();
    binaries.sort_unstable();
    assert_eq!(binaries, role_names(), "README.md's table of binaries");
}

#[test]
fn the_docs_give_every_role_its_default_ops_address() {
    // docs/operations.md: one `METRICS_BIND` row per role, with the binary's default; the other
    // rows are the API's and `flowctl up`'s.
    let operations = repository_file("docs/operations.md");
    let mut rows: Vec<(&str, &str)> = operations
        .lines()
        .filter(|line| line.starts_with("| `METRICS_BIND` |"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[3], cells[2].trim_matches('`'))
        })
        .filter(|(role, _)| *role != "API" && *role != "`flowctl up`")
        .collect();
    rows.sort_unstable();
    let mut expected: Vec<(&str, &str)> = ALL
        .iter()
        .map(|role| (role.name, role.ops_address))
        .collect();
    expected.sort_unstable();
    assert_eq!(rows, expected, "docs/operations.md's METRICS_BIND rows");

    // docs/monitoring.md: the example scrape configuration targets every role on its port.
    let monitoring = repository_file("docs/monitoring.md");
    let targets = monitoring
        .lines()
        .find(|line| line.contains("- targets: [") && !line.contains("api:"))
        .expect("the workers' targets in docs/monitoring.md");
    let mut listed: Vec<&str> = targets
        .split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .expect("[…]")
        .0
        .split(',')
        .map(str::trim)
        .collect();
    listed.sort_unstable();
    let mut expected: Vec<String> = ALL
        .iter()
        .map(|role| {
            let port = role.ops_address.rsplit_once(':').expect("host:port").1;
            format!("{}:{port}", role.name)
        })
        .collect();
    expected.sort();
    assert_eq!(listed, expected, "docs/monitoring.md's worker targets");
}
