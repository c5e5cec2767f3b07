//! Webhook delivery rules shared by the API and the webhook-worker: secrets and Standard Webhooks
//! v1 signatures, the address policy that keeps endpoints off internal networks (SSRF guard),
//! and the retry schedule.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

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

/// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
pub fn sign(secret: &str, message_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&secret_key(secret))
        .expect("HMAC takes keys of any length");
    mac.update(message_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
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

/// True when one of the signatures in `header` is `secret`'s signature of the message (what a
/// receiver checks).
pub fn verify(secret: &str, header: &str, message_id: &str, timestamp: i64, body: &[u8]) -> bool {
    let expected = sign(secret, message_id, timestamp, body);
    header
        .split(' ')
        .any(|candidate| constant_time_eq(candidate.as_bytes(), expected.as_bytes()))
}

fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    left.len() == right.len()
        && left
            .iter()
            .zip(right)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Encrypts endpoint secrets at rest when a master key is configured (AES-256-GCM, a random
/// nonce per secret). Stored secrets then read `enc:v1:<base64 nonce+ciphertext>`; secrets stored
/// in plain text before a key was configured still read as they are.
#[derive(Clone, clap::Args)]
pub struct SecretVault {
    /// Master key for webhook secrets at rest: base64 of 32 random bytes (`openssl rand -base64
    /// 32`). The API and every webhook-worker need the same key.
    #[arg(
        long = "webhook-secret-key",
        env = "WEBHOOK_SECRET_KEY",
        hide_env_values = true
    )]
    pub master_key: Option<String>,
}

impl std::fmt::Debug for SecretVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretVault")
            .field("master_key", &self.master_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Prefix of a secret encrypted at rest.
const SEALED_PREFIX: &str = "enc:v1:";

impl SecretVault {
    fn cipher(&self) -> Result<Option<aes_gcm::Aes256Gcm>, String> {
        use aes_gcm::KeyInit as _;
        let Some(key) = self.master_key.as_deref().filter(|key| !key.is_empty()) else {
            return Ok(None);
        };
        let bytes = BASE64
            .decode(key.trim())
            .map_err(|_| "WEBHOOK_SECRET_KEY must be base64".to_owned())?;
        aes_gcm::Aes256Gcm::new_from_slice(&bytes)
            .map(Some)
            .map_err(|_| "WEBHOOK_SECRET_KEY must be 32 bytes".to_owned())
    }

    /// Fails at start-up on a malformed key rather than at the first secret.
    pub fn check(&self) -> Result<(), String> {
        self.cipher().map(|_| ())
    }

    /// The form to store: sealed when a key is configured, else as it is.
    pub fn seal(&self, secret: &str) -> Result<String, String> {
        use aes_gcm::aead::Aead as _;
        let Some(cipher) = self.cipher()? else {
            return Ok(secret.to_owned());
        };
        let nonce: [u8; 12] = rand::random();
        let mut sealed = nonce.to_vec();
        sealed.extend(
            cipher
                .encrypt(&aes_gcm::Nonce::from(nonce), secret.as_bytes())
                .map_err(|_| "could not encrypt the secret".to_owned())?,
        );
        Ok(format!("{SEALED_PREFIX}{}", BASE64.encode(sealed)))
    }

    /// The secret from its stored form.
    pub fn open(&self, stored: &str) -> Result<String, String> {
        use aes_gcm::aead::Aead as _;
        let Some(encoded) = stored.strip_prefix(SEALED_PREFIX) else {
            return Ok(stored.to_owned());
        };
        let cipher = self.cipher()?.ok_or_else(|| {
            "the secret is encrypted but WEBHOOK_SECRET_KEY is not configured".to_owned()
        })?;
        let sealed = BASE64
            .decode(encoded)
            .map_err(|_| "the stored secret is corrupt".to_owned())?;
        if sealed.len() < 12 {
            return Err("the stored secret is corrupt".into());
        }
        let (nonce, ciphertext) = sealed.split_at(12);
        let nonce: [u8; 12] = nonce
            .try_into()
            .map_err(|_| "the stored secret is corrupt")?;
        let plain = cipher
            .decrypt(&aes_gcm::Nonce::from(nonce), ciphertext)
            .map_err(|_| "the secret cannot be decrypted with WEBHOOK_SECRET_KEY".to_owned())?;
        String::from_utf8(plain).map_err(|_| "the stored secret is corrupt".to_owned())
    }
}

/// Which endpoint addresses are acceptable.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct AddressPolicy {
    /// Allow endpoints on loopback, private, link-local and metadata addresses (local development
    /// and tests only).
    #[arg(long, env = "WEBHOOK_ALLOW_PRIVATE", default_value_t = false, action = clap::ArgAction::Set)]
    pub allow_private: bool,

    /// Allow plain `http://` endpoints (otherwise `https://` only).
    #[arg(long, env = "WEBHOOK_ALLOW_HTTP", default_value_t = false, action = clap::ArgAction::Set)]
    pub allow_http: bool,
}

impl AddressPolicy {
    /// Whether a delivery may connect to `address`.
    pub fn permits(&self, address: IpAddr) -> bool {
        self.allow_private || is_public(address)
    }
}

/// True for addresses on the public internet: not loopback, private, link-local (cloud metadata
/// lives there), shared (CGNAT), unspecified, multicast, broadcast, documentation or reserved,
/// and not an IPv6 form that reaches IPv4 or internal networks through a translator or tunnel.
pub fn is_public(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(address: Ipv4Addr) -> bool {
    let [a, b, c, _] = address.octets();
    !(address.is_private()
        || address.is_loopback()
        || address.is_link_local()
        || address.is_unspecified()
        || address.is_broadcast()
        || address.is_multicast()
        || address.is_documentation()
        || a == 0
        // Shared address space (RFC 6598).
        || (a == 100 && (64..128).contains(&b))
        // IETF protocol assignments (RFC 6890).
        || (a == 192 && b == 0 && c == 0)
        // 6to4 relay anycast (RFC 7526): a relay forwards to whatever IPv6 address it is given.
        || (a == 192 && b == 88 && c == 99)
        // Benchmarking (RFC 2544).
        || (a == 198 && (18..20).contains(&b))
        // Reserved (240/4).
        || a >= 240)
}

fn is_public_v6(address: Ipv6Addr) -> bool {
    let segments = address.segments();
    let in_prefix = |prefix: [u16; 8], length: u32| {
        let bits = u128::from(address);
        let prefix = u128::from(Ipv6Addr::from(prefix));
        let mask = u128::MAX.checked_shl(128 - length).unwrap_or(0);
        bits & mask == prefix & mask
    };
    // Whole prefixes are refused, not only those whose embedded IPv4 address is internal: a
    // translator or tunnel relay on the path decides where the packet ends up, not us.
    !(address.is_loopback()
        || address.is_unspecified()
        || address.is_multicast()
        || address.is_unique_local()
        || address.is_unicast_link_local()
        // IPv4-compatible (::/96, deprecated) and IPv4-translated (::ffff:0:0/96, RFC 2765).
        || segments[..6] == [0; 6]
        || segments[..6] == [0, 0, 0, 0, 0xffff, 0]
        // NAT64: the well-known prefix (64:ff9b::/96, RFC 6052) and the local-use one
        // (64:ff9b:1::/48, RFC 8215), both inside 64:ff9b::/32.
        || in_prefix([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 32)
        // Discard-only (100::/64, RFC 6666).
        || in_prefix([0x100, 0, 0, 0, 0, 0, 0, 0], 64)
        // IETF protocol assignments (2001::/23): Teredo (2001::/32), benchmarking, ORCHID.
        || in_prefix([0x2001, 0, 0, 0, 0, 0, 0, 0], 23)
        // Documentation (2001:db8::/32).
        || in_prefix([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32)
        // 6to4 (2002::/16, RFC 3056): the IPv4 address inside may be anything.
        || in_prefix([0x2002, 0, 0, 0, 0, 0, 0, 0], 16)
        // Site-local (fec0::/10, deprecated but still routed inside some networks).
        || in_prefix([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10))
}

/// Longest accepted endpoint URL.
pub const MAX_URL_CHARS: usize = 2_000;

/// Checks an endpoint URL's form against `policy`: http(s) (plain http only when allowed), a
/// host, no credentials, and a literal IP address only when the policy permits it. Names are
/// checked when they are resolved: see [`check_endpoint_url`].
pub fn parse_endpoint_url(text: &str, policy: AddressPolicy) -> Result<url::Url, String> {
    if text.chars().count() > MAX_URL_CHARS {
        return Err(format!("url must be at most {MAX_URL_CHARS} characters"));
    }
    let url = url::Url::parse(text.trim())
        .map_err(|_| "url must be an absolute http(s) URL".to_owned())?;
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_http => {}
        "http" => return Err("url must use https".into()),
        _ => return Err("url must be an absolute http(s) URL".into()),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("url must not contain credentials".into());
    }
    let literal = match url.host() {
        None => return Err("url must have a host".into()),
        Some(url::Host::Ipv4(address)) => Some(IpAddr::V4(address)),
        Some(url::Host::Ipv6(address)) => Some(IpAddr::V6(address)),
        Some(url::Host::Domain(_)) => None,
    };
    if let Some(address) = literal
        && !policy.permits(address)
    {
        return Err(REFUSED_ADDRESS.into());
    }
    Ok(url)
}

/// Why an endpoint address is refused.
pub const REFUSED_ADDRESS: &str =
    "url must not point to a loopback, private, link-local or metadata address";

/// [`parse_endpoint_url`], then resolves the host: every address it resolves to must be
/// permitted (checked again at each delivery, where only permitted addresses are connected to).
pub async fn check_endpoint_url(text: &str, policy: AddressPolicy) -> Result<url::Url, String> {
    let url = parse_endpoint_url(text, policy)?;
    if let Some(url::Host::Domain(host)) = url.host() {
        let port = url.port_or_known_default().unwrap_or(443);
        let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|_| format!("url host {host} could not be resolved"))?
            .collect();
        if addresses.is_empty() {
            return Err(format!("url host {host} could not be resolved"));
        }
        if addresses
            .iter()
            .any(|address| !policy.permits(address.ip()))
        {
            return Err(REFUSED_ADDRESS.into());
        }
    }
    Ok(url)
}

/// Bytes of a response body kept with an attempt, and the most kept of an attempt's error text.
pub const STORED_TEXT_BYTES: usize = 1_024;

/// `text` as Postgres can store it in a `text` column: without NUL characters (which Postgres
/// refuses), cut to at most `max_bytes` bytes on a character boundary, so it stays valid UTF-8.
pub fn storable_text(text: &str, max_bytes: usize) -> String {
    let mut stored = String::with_capacity(text.len().min(max_bytes));
    for character in text.chars().filter(|character| *character != '\0') {
        if stored.len() + character.len_utf8() > max_bytes {
            break;
        }
        stored.push(character);
    }
    stored
}

/// Delays before each attempt of a delivery: the first is usually zero (immediately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule(pub Vec<Duration>);

impl RetrySchedule {
    /// Parses `0s,5s,5m,30m,2h,5h,10h,10h` (units ms, s, m, h, d).
    pub fn parse(text: &str) -> Result<Self, String> {
        let delays = text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(parse_duration)
            .collect::<Result<Vec<_>, _>>()?;
        if delays.is_empty() {
            return Err("the retry schedule needs at least one attempt".into());
        }
        Ok(Self(delays))
    }

    /// Attempts a delivery gets in all.
    pub fn attempts(&self) -> usize {
        self.0.len()
    }

    /// Delay before attempt `number` (1-based) with ±20% jitter, or `None` past the last one.
    pub fn delay_before(&self, number: usize) -> Option<Duration> {
        let base = *self.0.get(number.checked_sub(1)?)?;
        let factor = 0.8 + rand::random::<f64>() * 0.4;
        Some(base.mul_f64(factor))
    }
}

impl std::str::FromStr for RetrySchedule {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

/// Parses `250ms`, `5s`, `30m`, `2h`, `5d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit (ms, s, m, h or d)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a number"))?;
    let millis = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{text}` has an unknown unit (ms, s, m, h or d)")),
    };
    Ok(Duration::from_millis(number.saturating_mul(millis)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Secrets sealed before the move to aes-gcm 0.11 must still open: this one was sealed by an
    /// independent AES-256-GCM implementation (Python's `cryptography`) with the same layout
    /// (12-byte nonce, then ciphertext and tag).
    #[test]
    fn secrets_sealed_by_standard_aes_256_gcm_open_and_new_ones_round_trip() {
        let vault = SecretVault {
            master_key: Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into()),
        };
        let sealed = "enc:v1:ZGVmZ2hpamtsbW5vP3OtAxq2NfFTEj6cDtsZyG45ZkSeR0YSOr29CQ==";
        assert_eq!(vault.open(sealed).unwrap(), "whsec_compat");
        let mut tampered = sealed.to_owned();
        tampered.replace_range(20..21, "A");
        assert!(
            vault.open(&tampered).is_err(),
            "a changed ciphertext is refused"
        );
        let resealed = vault.seal("whsec_new").unwrap();
        assert!(resealed.starts_with(SEALED_PREFIX));
        assert_eq!(vault.open(&resealed).unwrap(), "whsec_new");
    }

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
    }

    #[test]
    fn secrets_are_prefixed_base64_of_32_bytes() {
        let secret = generate_secret();
        assert!(secret.starts_with(SECRET_PREFIX));
        assert_eq!(secret_key(&secret).len(), 32);
        assert_ne!(secret, generate_secret());
    }

    #[test]
    fn secrets_are_sealed_with_the_master_key_and_opened_again() {
        let key = BASE64.encode([7u8; 32]);
        let vault = SecretVault {
            master_key: Some(key),
        };
        let secret = generate_secret();
        let sealed = vault.seal(&secret).unwrap();
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains(&secret[SECRET_PREFIX.len()..]));
        assert_ne!(
            sealed,
            vault.seal(&secret).unwrap(),
            "a fresh nonce each time"
        );
        assert_eq!(vault.open(&sealed).unwrap(), secret);
        // Secrets stored before the key was configured still read.
        assert_eq!(vault.open(&secret).unwrap(), secret);
        let other = SecretVault {
            master_key: Some(BASE64.encode([8u8; 32])),
        };
        assert!(other.open(&sealed).is_err());
        let none = SecretVault { master_key: None };
        assert_eq!(none.seal(&secret).unwrap(), secret);
        assert!(none.open(&sealed).is_err());
        let short = SecretVault {
            master_key: Some(BASE64.encode([1u8; 16])),
        };
        assert!(short.check().is_err());
    }

    #[test]
    fn internal_addresses_are_not_public() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!is_public(internal.parse().unwrap()), "{internal}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        let open = AddressPolicy {
            allow_private: true,
            allow_http: true,
        };
        assert!(open.permits("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn ipv6_forms_that_tunnel_or_translate_to_other_networks_are_not_public() {
        for refused in [
            // 6to4, with a public and with an internal IPv4 address inside.
            "2002:5db8:d822::1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
            // Teredo.
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            // Benchmarking, inside the IETF protocol assignments.
            "2001:2::1",
            // NAT64, well-known and local-use prefixes.
            "64:ff9b::7f00:1",
            "64:ff9b::5db8:d822",
            "64:ff9b:1::a9fe:a9fe",
            "64:ff9b:1:ffff::1",
            // Site-local.
            "fec0::1",
            "feff:ffff::1",
            // IPv4-translated and IPv4-compatible forms.
            "::ffff:0:7f00:1",
            "::7f00:1",
            "::5db8:d822",
            // Discard-only and documentation.
            "100::1",
            "2001:db8::1",
        ] {
            let address: IpAddr = refused.parse().unwrap();
            assert!(!is_public(address), "{refused}");
            let strict = AddressPolicy {
                allow_private: false,
                allow_http: false,
            };
            assert!(!strict.permits(address), "{refused}");
            assert_eq!(
                parse_endpoint_url(&format!("https://[{refused}]/hook"), strict).unwrap_err(),
                REFUSED_ADDRESS,
                "{refused}"
            );
        }
        // IPv4-mapped addresses are judged by the IPv4 address they carry.
        assert!(!is_public("::ffff:10.0.0.1".parse().unwrap()));
        assert!(is_public("::ffff:93.184.216.34".parse().unwrap()));
        assert!(!is_public("192.88.99.1".parse().unwrap()));
        // Neighbours of the refused prefixes stay public.
        for public in [
            "2001:200::1",
            "2003::1",
            "64:ff9c::1",
            "2a00:1450:4001::200e",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn stored_text_has_no_nul_and_is_cut_on_a_character_boundary() {
        assert_eq!(storable_text("ok\0done\0", 1_024), "okdone");
        assert_eq!(storable_text("plain", 1_024), "plain");
        // Two-byte characters: 1,024 bytes hold 512 of them, never half of one.
        let accented = "é".repeat(600);
        let stored = storable_text(&format!("\0{accented}"), 1_023);
        assert_eq!(stored, "é".repeat(511));
        assert_eq!(storable_text(&accented, STORED_TEXT_BYTES).len(), 1_024);
        assert_eq!(storable_text("\0\0", 10), "");
    }

    #[test]
    fn endpoint_urls_are_checked_against_the_policy() {
        let strict = AddressPolicy {
            allow_private: false,
            allow_http: false,
        };
        assert!(parse_endpoint_url("https://hooks.example.com/flow", strict).is_ok());
        for refused in [
            "http://hooks.example.com/flow",
            "https://127.0.0.1/hook",
            "https://[::1]/hook",
            "https://169.254.169.254/latest/meta-data",
            "https://user:pass@hooks.example.com/",
            "ftp://hooks.example.com/",
            "not a url",
        ] {
            assert!(parse_endpoint_url(refused, strict).is_err(), "{refused}");
        }
        let local = AddressPolicy {
            allow_private: true,
            allow_http: true,
        };
        assert!(parse_endpoint_url("http://127.0.0.1:9000/hook", local).is_ok());
    }

    #[tokio::test]
    async fn names_resolving_to_internal_addresses_are_refused() {
        let strict = AddressPolicy {
            allow_private: false,
            allow_http: true,
        };
        assert_eq!(
            check_endpoint_url("http://localhost:9000/hook", strict)
                .await
                .unwrap_err(),
            REFUSED_ADDRESS
        );
    }

    #[test]
    fn retry_schedules_parse_and_jitter_within_twenty_percent() {
        let schedule = RetrySchedule::parse("0s,5s,5m,30m,2h,5h,10h,10h").unwrap();
        assert_eq!(schedule.attempts(), 8);
        assert_eq!(schedule.0[2], Duration::from_secs(300));
        assert_eq!(schedule.delay_before(1), Some(Duration::ZERO));
        let second = schedule.delay_before(2).unwrap();
        assert!(second >= Duration::from_secs(4) && second <= Duration::from_secs(6));
        assert_eq!(schedule.delay_before(9), None);
        assert!(RetrySchedule::parse("5x").is_err());
        assert!(RetrySchedule::parse("").is_err());
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    }
}
