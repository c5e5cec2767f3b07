//! Addresses fit for logs and error messages: [`redact_url`].

/// A connection address (`postgres://`, `amqp://`, an export store's URL) fit for logs and error
/// messages: its password is replaced by `***`, so is a user name given without a password (a
/// token passed as the user, as `amqp://TOKEN@host` does), and so is the value of every query
/// parameter that may carry a secret (`password`, `sslpassword`, `token`, `secret`, `key`...).
/// An address that does not parse is not shown at all.
pub fn redact_url(address: &str) -> String {
    const HIDDEN: &str = "***";
    let Ok(mut url) = url::Url::parse(address.trim()) else {
        return "an unparsable address".to_owned();
    };
    if url.password().is_some() {
        let _ = url.set_password(Some(HIDDEN));
    } else if !url.username().is_empty() {
        let _ = url.set_username(HIDDEN);
    }
    if url.query().is_some() {
        let secret = |name: &str| {
            let name = name.to_ascii_lowercase();
            ["pass", "token", "secret", "key", "auth", "credential"]
                .iter()
                .any(|word| name.contains(word))
        };
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = if secret(&name) {
                    HIDDEN.to_owned()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_tokens_and_secret_parameters_are_hidden() {
        assert_eq!(
            redact_url("amqp://guest:s3cret@10.0.0.1:5672/%2f"),
            "amqp://guest:***@10.0.0.1:5672/%2f"
        );
        // A token given as the user name, with no password.
        let token = redact_url("amqps://eyJhbGciOiJIUzI1NiJ9.abc@broker.example.com/vhost");
        assert_eq!(token, "amqps://***@broker.example.com/vhost");
        assert!(!token.contains("eyJ"));
        let query = redact_url(
            "postgres://app@db.internal/flow?sslmode=require&password=hunter2&sslpassword=x&application_name=api",
        );
        assert!(
            !query.contains("hunter2") && !query.contains("sslpassword=x"),
            "{query}"
        );
        assert!(query.contains("sslmode=require") && query.contains("application_name=api"));
        assert_eq!(
            redact_url("postgres://127.0.0.1:5432/flow"),
            "postgres://127.0.0.1:5432/flow"
        );
        assert_eq!(redact_url("not a url at all"), "an unparsable address");
    }
}
