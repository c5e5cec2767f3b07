//! The dashboard's CSV uploads (assign, users import) at their largest allowed size: whatever the
//! file holds, empty records or valid lines, it is answered (with a result per row, or a 400
//! naming the limit), and the API keeps serving other requests meanwhile. Run on a multi-thread
//! runtime, so a parse that held its thread would show as an upload that never answers (the
//! client gives up after 30 s) rather than as a test that hangs.

use flow_api::extract::MAX_BODY_BYTES;
use flow_app::assign::MAX_BULK_ITEMS;
use flow_app::user_import::{MAX_IMPORT_BYTES, MAX_IMPORT_ROWS};
use flow_tests::TestApp;
use flow_tests::dashboard::org_with_admin;

/// Room left in a body limit for the multipart framing around the file.
const FRAMING: usize = 1024;

/// `header` followed by copies of `line` up to `size` bytes.
fn file_of(header: &str, line: &str, size: usize) -> Vec<u8> {
    let mut file = header.as_bytes().to_vec();
    while file.len() + line.len() <= size {
        file.extend_from_slice(line.as_bytes());
    }
    file
}

/// `header` followed by numbered lines made by `line` up to `size` bytes.
fn numbered_file(header: &str, line: impl Fn(usize) -> String, size: usize) -> Vec<u8> {
    let mut file = header.as_bytes().to_vec();
    for index in 0.. {
        let next = line(index);
        if file.len() + next.len() > size {
            break;
        }
        file.extend_from_slice(next.as_bytes());
    }
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_import_of_the_largest_size_of_empty_records_is_refused_for_its_rows() {
    let app = TestApp::spawn().await;
    let (_org, client) = org_with_admin(&app).await;
    let file = file_of("email,name\n", ",\n", MAX_IMPORT_BYTES - FRAMING);
    let page = client
        .post_file("/dashboard/users", &[], "empty.csv", &file)
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("more than {MAX_IMPORT_ROWS} rows; split it")),
        "{}",
        page.body
    );
    // Blank lines the CSV reader skips itself: nothing to import, answered all the same.
    let blank = file_of("email,name\n", "\n", MAX_IMPORT_BYTES - FRAMING);
    let page = client
        .post_file("/dashboard/users", &[], "blank.csv", &blank)
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("<strong>0</strong> new"),
        "{}",
        page.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_import_of_valid_lines_is_answered_at_the_largest_size_and_row_count() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    let too_many = numbered_file(
        "email,name\n",
        |index| format!("person{index}@example.com,Person {index}\n"),
        MAX_IMPORT_BYTES - FRAMING,
    );
    let page = client
        .post_file("/dashboard/users", &[], "everyone.csv", &too_many)
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("more than {MAX_IMPORT_ROWS} rows"))
    );

    // As many rows as allowed, with a blank line between each, and one bad address on the last
    // line, which the page names by the line an editor shows.
    let mut file = String::from("email,name\n");
    for index in 0..MAX_IMPORT_ROWS - 1 {
        file.push_str(&format!("person{index}@example.com,Person {index}\n\n"));
    }
    file.push_str("not-an-address,Last\n");
    assert!(file.len() < MAX_IMPORT_BYTES - FRAMING);
    let page = client
        .post_file("/dashboard/users", &[], "everyone.csv", file.as_bytes())
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("<strong>{}</strong> new", MAX_IMPORT_ROWS - 1)),
        "{}",
        page.body
    );
    let last_line = 2 * (MAX_IMPORT_ROWS - 1) + 2;
    assert!(
        page.body
            .contains(&format!("<td class=\"num\">{last_line}</td>")),
        "the bad row is named by its line"
    );
    let users: i64 = sqlx::query_scalar("SELECT count(*) FROM users WHERE org_id = $1")
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(users, i64::try_from(MAX_IMPORT_ROWS - 1).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assign_upload_of_the_largest_size_is_refused_for_its_rows_whatever_it_holds() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    // The page shows its errors beside the form, which needs a flow to choose.
    app.create_flow(&org, "Onboarding", &[30]).await;
    let empty = file_of("email,flow\n", ",\n", MAX_BODY_BYTES - FRAMING);
    let lines = numbered_file(
        "email,flow\n",
        |index| format!("person{index}@example.com,Onboarding\n"),
        MAX_BODY_BYTES - FRAMING,
    );
    for (name, file) in [("empty.csv", empty), ("lines.csv", lines)] {
        let page = client
            .post_file("/dashboard/assign/upload", &[], name, &file)
            .await;
        assert_eq!(page.status, 400, "{name}: {}", page.body);
        assert!(
            page.body
                .contains(&format!("more than {MAX_BULK_ITEMS} rows; split it")),
            "{name}: {}",
            page.body
        );
    }
    assert_eq!(app.assignment_count().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assign_upload_of_the_most_rows_gets_a_result_per_row() {
    let app = TestApp::spawn().await;
    let (org, client) = org_with_admin(&app).await;
    app.create_users(&org, &["known@example.com"]).await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    // Empty records between the rows count toward the limit too: a file of exactly the most
    // records allowed, half of them empty.
    let mut file = String::from("email\nknown@example.com\n");
    for index in 1..MAX_BULK_ITEMS / 2 {
        file.push_str(&format!(",\nghost{index}@example.com\n"));
    }
    file.push_str(",\n");
    let page = client
        .post_file(
            "/dashboard/assign/upload",
            &[("flow", &flow)],
            "team.csv",
            file.as_bytes(),
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let rows: Vec<&str> = page.body.split("<tr class=").skip(1).collect();
    assert_eq!(rows.len(), MAX_BULK_ITEMS / 2);
    assert!(rows[0].starts_with("\"ok\""), "{}", rows[0]);
    assert!(
        rows[1].starts_with("\"failed\"") && rows[1].contains("ghost1@example.com"),
        "{}",
        rows[1]
    );
    // One empty record more is one too many.
    file.push_str(",\n");
    let page = client
        .post_file(
            "/dashboard/assign/upload",
            &[("flow", &flow)],
            "team.csv",
            file.as_bytes(),
        )
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("more than {MAX_BULK_ITEMS} rows"))
    );
}
