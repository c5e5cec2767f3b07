//! Standard Webhooks v1 signatures: the secrets endpoints are given, the `webhook-signature`
//! header every delivery carries, and the check a receiver makes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` and 32 random bytes in base64.
pub fn generate_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{SECRET_PREFIX}{}", BASE64.encode(bytes))
}

/// The HMAC key of a secret: the base64 after `whsec_` (the raw text when it is not base64, as
/// the reference libraries do).
fn secret_key(secret: &str) -> Vec<u8> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    BASE64
        .decode(encoded)
        .unwrap_or_else(|_| encoded.as_bytes().to_vec())
}

/// The MAC of a message under `secret`, fed `{id}.{timestamp}.{body}`.
fn message_mac(secret: &str, message_id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&secret_key(secret))
        .expect("HMAC takes keys of any length");
    mac.update(message_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
pub fn sign(secret: &str, message_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mac = message_mac(secret, message_id, timestamp, body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header: one signature per secret, space-separated (during a rotation
/// the previous secret signs too).
pub fn signature_header(secrets: &[&str], message_id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| sign(secret, message_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}
/// True when `presented` is `secret` (a shared secret sent as is, as Okta's event hooks send
/// theirs), compared in constant time: both are MACed under one key and the tags compared.
pub fn same_secret(secret: &str, presented: &str) -> bool {
    let tag = |text: &str| {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(b"flow.same_secret")
            .expect("HMAC takes keys of any length");
        mac.update(text.as_bytes());
        mac
    };
    tag(presented)
        .verify_slice(&tag(secret).finalize().into_bytes())
        .is_ok()
}

/// True when one of the signatures in `header` is `secret`'s signature of the message (what a
/// receiver checks). Each tag is compared in constant time.
pub fn verify(secret: &str, header: &str, message_id: &str, timestamp: i64, body: &[u8]) -> bool {
    let mac = message_mac(secret, message_id, timestamp, body);
    header
        .split(' ')
        .filter_map(|candidate| candidate.strip_prefix("v1,"))
        .filter_map(|tag| BASE64.decode(tag).ok())
        .any(|tag| mac.clone().verify_slice(&tag).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_the_standard_webhooks_test_vector() {
        let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        let signature = sign(
            secret,
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            body,
        );
        assert_eq!(signature, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
        let header = signature_header(
            &[&generate_secret(), secret],
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            body,
        );
        assert!(verify(
            secret,
            &header,
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            body
        ));
        assert!(!verify(
            secret,
            &header,
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_554,
            body
        ));
        // Other versions, tags that are not base64 and cut tags are not signatures.
        let tag = signature.strip_prefix("v1,").unwrap();
        for header in [
            format!("v2,{tag}"),
            "v1,not base64!".to_owned(),
            format!("v1,{}", &tag[..tag.len() - 4]),
            tag.to_owned(),
        ] {
            assert!(
                !verify(
                    secret,
                    &header,
                    "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                    1_649_367_553,
                    body
                ),
                "{header}"
            );
        }
    }

    #[test]
    fn same_secret_is_equality() {
        let secret = generate_secret();
        assert!(same_secret(&secret, &secret.clone()));
        assert!(!same_secret(&secret, &generate_secret()));
        assert!(!same_secret(&secret, ""));
        assert!(!same_secret(&secret, &secret[..secret.len() - 1]));
    }

    #[test]
    fn secrets_are_prefixed_base64_of_32_bytes() {
        let secret = generate_secret();
        assert!(secret.starts_with(SECRET_PREFIX));
        assert_eq!(secret_key(&secret).len(), 32);
        assert_ne!(secret, generate_secret());
    }
}
