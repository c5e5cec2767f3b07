//! Dashboard helpers: accounts with their sign-in links, and an HTTP client that keeps the
//! session cookie and sends forms the way a browser on the dashboard's own pages does (with a
//! same-origin `Origin` and `Sec-Fetch-Site`), so tests can also send what another site would.

use std::sync::Mutex;
use std::time::Duration;

use flow_common::db::accounts::Role;
use flow_domain::ids::OrgId;
use reqwest::header::{self, HeaderMap};

use crate::{TestApp, TestOrg};

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "flow_session";

/// A page as the client received it.
#[derive(Debug)]
pub struct Page {
    /// Status code.
    pub status: u16,
    pub headers: HeaderMap,
    /// Body text.
    pub body: String,
}

impl Page {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// Where a redirect points.
    pub fn location(&self) -> Option<&str> {
        self.header("location")
    }

    /// Whether this is a redirect to the sign-in page.
    pub fn is_sign_in_redirect(&self) -> bool {
        self.status == 303
            && self
                .location()
                .is_some_and(|location| location.starts_with("/dashboard/sign-in"))
    }
}

/// Creates a dashboard account of `org` with `role`; returns its one-time sign-in link (what
/// `flowctl admin create` prints).
pub async fn create_account(app: &TestApp, org: OrgId, email: &str, role: Role) -> String {
    flowctl::accounts::create(&app.api, org, email, role)
        .await
        .expect("create dashboard account")
        .link
}

/// A new organization (standard tier) and its admin signed in ([`DashboardClient::admin`]).
pub async fn org_with_admin(app: &TestApp) -> (TestOrg, DashboardClient) {
    let org = app.create_org(flow_common::db::orgs::Tier::Standard).await;
    let client = DashboardClient::admin(app, org.id).await;
    (org, client)
}

/// A browser-like client of one dashboard session.
pub struct DashboardClient {
    /// `http://127.0.0.1:port`.
    pub base_url: String,
    client: reqwest::Client,
    cookie: Mutex<Option<String>>,
}

impl DashboardClient {
    /// A client without a session.
    pub fn new(app: &TestApp) -> Self {
        Self::from_address(app, None)
    }

    /// A client without a session whose connections come from `address` (a loopback address such
    /// as `127.0.0.2`, so that a test can play several clients of the sign-in throttle), or from
    /// the default one.
    pub fn from_address(app: &TestApp, address: Option<std::net::IpAddr>) -> Self {
        Self {
            base_url: app.base_url.clone(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .local_address(address)
                .build()
                .expect("http client"),
            cookie: Mutex::new(None),
        }
    }

    /// Signs in with `email` and `password` on the sign-in form.
    pub async fn sign_in(&self, email: &str, password: &str) -> Page {
        self.post_form(
            "/dashboard/sign-in",
            &[("email", email), ("password", password)],
        )
        .await
    }

    /// Opens `link`, sets `password`, and keeps the session it starts.
    pub async fn with_link(app: &TestApp, link: &str, password: &str) -> Self {
        let client = Self::new(app);
        let path = link
            .strip_prefix(&app.base_url)
            .expect("link on this service")
            .to_owned();
        let page = client
            .post_form(&path, &[("password", password), ("confirm", password)])
            .await;
        assert_eq!(page.status, 303, "setting the password: {}", page.body);
        assert!(client.session().is_some(), "a session starts");
        client
    }

    /// Creates an account and signs it in; returns the client.
    pub async fn signed_in(app: &TestApp, org: OrgId, email: &str, role: Role) -> Self {
        let link = create_account(app, org, email, role).await;
        Self::with_link(app, &link, "a long enough password").await
    }

    /// Signs in a new admin of `org`, `admin-{org}@example.com`.
    pub async fn admin(app: &TestApp, org: OrgId) -> Self {
        Self::signed_in(app, org, &format!("admin-{org}@example.com"), Role::Admin).await
    }

    /// The session cookie's value, if any.
    pub fn session(&self) -> Option<String> {
        self.cookie.lock().expect("lock").clone()
    }

    /// Replaces the session cookie (to replay an old one).
    pub fn set_session(&self, value: Option<String>) {
        *self.cookie.lock().expect("lock") = value;
    }

    fn remember(&self, headers: &HeaderMap) {
        for value in headers.get_all(header::SET_COOKIE) {
            let Ok(text) = value.to_str() else { continue };
            let Some(rest) = text.strip_prefix(&format!("{SESSION_COOKIE}=")) else {
                continue;
            };
            let value = rest.split(';').next().unwrap_or("").to_owned();
            let removed = value.is_empty()
                || text.contains("Max-Age=0")
                || text.contains("expires=Thu, 01 Jan 1970");
            *self.cookie.lock().expect("lock") = (!removed).then_some(value);
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Page {
        let request = match self.session() {
            Some(value) => request.header(header::COOKIE, format!("{SESSION_COOKIE}={value}")),
            None => request,
        };
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        self.remember(&headers);
        let body = response.text().await.unwrap_or_default();
        Page {
            status,
            headers,
            body,
        }
    }

    /// GET a dashboard path.
    pub async fn get(&self, path: &str) -> Page {
        self.send(self.client.get(format!("{}{path}", self.base_url)))
            .await
    }

    /// GET a dashboard path as htmx does; insists on a 200 and returns the HTML.
    pub async fn get_htmx(&self, path: &str) -> String {
        let page = self
            .send(
                self.client
                    .get(format!("{}{path}", self.base_url))
                    .header("hx-request", "true"),
            )
            .await;
        assert_eq!(page.status, 200, "GET {path}: {}", page.body);
        page.body
    }

    /// GET a dashboard path and insist on a 200; returns the HTML.
    pub async fn page(&self, path: &str) -> String {
        let page = self.get(path).await;
        assert_eq!(page.status, 200, "GET {path}: {}", page.body);
        page.body
    }

    /// POST a form from the dashboard's own page.
    pub async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> Page {
        let origin = self.base_url.clone();
        self.post_form_with(
            path,
            form,
            &[("origin", &origin), ("sec-fetch-site", "same-origin")],
        )
        .await
    }

    /// POST a form with exactly these extra headers.
    pub async fn post_form_with(
        &self,
        path: &str,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Page {
        let body = serde_html_form::to_string(form).expect("form encodes");
        let mut request = self
            .client
            .post(format!("{}{path}", self.base_url))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request).await
    }

    /// POST a `multipart/form-data` form from the dashboard's own page: text fields, and one file
    /// field `file` named `file_name`.
    pub async fn post_file(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        file_name: &str,
        file: &[u8],
    ) -> Page {
        let boundary = format!("flowtest{}", uuid::Uuid::new_v4().simple());
        let mut body = Vec::new();
        for (name, value) in fields {
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        }
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\nContent-Type: text/csv\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(file);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let request = self
            .client
            .post(format!("{}{path}", self.base_url))
            .header(
                header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .header("origin", self.base_url.clone())
            .header("sec-fetch-site", "same-origin")
            .body(body);
        self.send(request).await
    }
}

/// The text between `start` and the next `end` in `html`, after the first `start`.
pub fn between<'a>(html: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = &html[html.find(start)? + start.len()..];
    Some(&rest[..rest.find(end)?])
}

/// The role of an account, from its name (for brevity in tests).
pub fn role(name: &str) -> Role {
    name.parse::<Role>().expect("admin or viewer")
}

/// The id (`acc_…`) of the dashboard account with `email`.
pub async fn account_id(app: &TestApp, email: &str) -> String {
    let id: flow_domain::ids::AccountId =
        sqlx::query_scalar("SELECT id FROM dashboard_accounts WHERE email_normalized = lower($1)")
            .bind(email)
            .fetch_one(&app.db)
            .await
            .expect("the account");
    id.to_string()
}
