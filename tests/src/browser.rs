//! Debian's headless Chromium driven over WebDriver (chromedriver on a free local port), for the
//! dashboard's browser tests: a fresh profile and download directory per browser, bounded waits
//! for elements, and a screenshot of each page (to `FLOW_SCREENSHOTS` when set, e.g.
//! `docs/screenshots`, else to a temporary directory). Without Chromium a test fails: it never
//! skips.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// Debian's Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's chromedriver.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long a page or an element may take to appear.
pub const WAIT: Duration = Duration::from_secs(20);

/// Chromium under chromedriver, with a fresh profile and download directory.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    /// `http://127.0.0.1:port` of the service.
    pub base_url: String,
    /// Where [`Browser::screenshot`] saves.
    pub screenshots: PathBuf,
    /// Where Chromium downloads to.
    pub downloads: PathBuf,
    profile: PathBuf,
    driver: tokio::process::Child,
}

impl Browser {
    /// Starts chromedriver on a free port and a Chromium session against `base_url`.
    pub async fn start(base_url: &str) -> Self {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: the browser test needs Debian's chromium and chromium-driver \
                 (apt-get install -y chromium chromium-driver; .ci/run installs them)"
            );
        }
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().expect("address").port()
        };
        let driver = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            // Chromium on Linux takes its locale from the environment: en-US whatever the
            // machine's, so that date fields read month/day/year (see `Browser::type_date`).
            .env("LANGUAGE", "en_US")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver did not listen"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let scratch =
            std::env::temp_dir().join(format!("flow-browser-{}", uuid::Uuid::new_v4().simple()));
        let profile = scratch.join("profile");
        let downloads = scratch.join("downloads");
        std::fs::create_dir_all(&downloads).expect("download directory");
        let screenshots = std::env::var_os("FLOW_SCREENSHOTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| scratch.join("screenshots"));
        std::fs::create_dir_all(&screenshots).expect("screenshot directory");
        // The machine's network is closed: these flags keep Chromium from waiting on connections
        // of its own (updates, sync, safe browsing).
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--window-size=1280,900",
                    "--lang=en-US",
                    format!("--user-data-dir={}", profile.display()),
                ],
                "prefs": {
                    "download.default_directory": downloads.display().to_string(),
                    "download.prompt_for_download": false,
                    "safebrowsing.enabled": false,
                },
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let client = ClientBuilder::rustls()
            .expect("rustls")
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Self {
            client,
            base_url: base_url.to_owned(),
            screenshots,
            downloads,
            profile: scratch,
            driver,
        }
    }

    /// Opens `path` of the service.
    pub async fn open(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base_url))
            .await
            .expect("navigates");
    }

    /// The element `css` selects, waiting up to [`WAIT`] for it.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("{css} did not appear: {error}"))
    }

    /// Clicks the element `css` selects.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.expect("clicks");
    }

    /// Clicks the link with exactly this text.
    pub async fn link(&self, text: &str) {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::LinkText(text))
            .await
            .unwrap_or_else(|error| panic!("link {text} did not appear: {error}"))
            .click()
            .await
            .expect("clicks");
    }

    /// Clears the field `css` selects and types `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.find(css).await;
        field.clear().await.expect("clears");
        field.send_keys(text).await.expect("types");
    }

    /// The path of the page shown.
    pub async fn path(&self) -> String {
        self.client
            .current_url()
            .await
            .expect("url")
            .path()
            .to_owned()
    }

    /// The source of the page shown.
    pub async fn html(&self) -> String {
        self.client.source().await.expect("page source")
    }

    /// Reloads until `css` is on the page.
    pub async fn reload_until(&self, css: &str, what: &str) -> fantoccini::elements::Element {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(found) = self.client.find(Locator::Css(css)).await {
                return found;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            self.client.refresh().await.expect("reloads");
        }
    }

    /// Types `date` into the date field `css` as a person does (month, day, year: the browser
    /// runs in en-US), and checks the field took it.
    pub async fn type_date(&self, css: &str, date: chrono::NaiveDate) {
        let field = self.find(css).await;
        field
            .send_keys(&date.format("%m%d%Y").to_string())
            .await
            .expect("types");
        let value = field.prop("value").await.expect("value");
        assert_eq!(
            value.as_deref(),
            Some(date.to_string().as_str()),
            "the date field took {date}"
        );
    }

    /// Saves a screenshot of the whole page as `name.png`, at the window's present width.
    pub async fn screenshot(&self, name: &str) {
        let (width, window_height) = self.client.get_window_size().await.expect("window size");
        let width = u32::try_from(width).unwrap_or(1280);
        let window_height = u32::try_from(window_height).unwrap_or(900);
        let height = self
            .client
            .execute("return document.documentElement.scrollHeight;", vec![])
            .await
            .ok()
            .and_then(|value| value.as_u64())
            .unwrap_or(900)
            .clamp(700, 2400);
        self.client
            .set_window_size(width, u32::try_from(height).unwrap_or(900) + 90)
            .await
            .expect("resizes");
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(self.screenshots.join(format!("{name}.png")), png).expect("saved");
        self.client
            .set_window_size(width, window_height)
            .await
            .expect("resizes");
    }

    /// Ends the session and chromedriver, and removes the profile and downloads.
    pub async fn close(self) {
        let Self {
            client,
            profile,
            mut driver,
            ..
        } = self;
        drop(client.close().await);
        drop(driver.kill().await);
        drop(std::fs::remove_dir_all(profile));
    }
}
