//! `sqlx::migrate!` embeds the migrations when this crate compiles, but cargo does not know they
//! are an input: without this, a new migration file is silently left out of a warm build.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
