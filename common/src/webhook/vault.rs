//! Endpoint secrets sealed at rest: AES-256-GCM under a master key every API replica and
//! webhook-worker shares, each ciphertext bound to its endpoint.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use flow_domain::ids::WebhookEndpointId;

/// Encrypts endpoint secrets at rest (AES-256-GCM, a random nonce per secret, the endpoint's id as
/// associated data). Stored secrets read `enc:v2:<base64 nonce+ciphertext>`; those sealed before
/// the binding (`enc:v1:`) and those stored in plain text before a key was required still open,
/// and `flowctl webhooks reseal` rewrites them as `enc:v2:`.
#[derive(Clone, clap::Args)]
pub struct SecretVault {
    /// Master key for webhook secrets at rest: base64 of 32 random bytes (`flowctl webhooks
    /// generate-key`, or `openssl rand -base64 32`). Required; the API and every webhook-worker
    /// need the same key.
    #[arg(
        long = "webhook-secret-key",
        env = "WEBHOOK_SECRET_KEY",
        hide_env_values = true
    )]
    pub master_key: Option<String>,

    /// Whether secrets may be stored in plain text when no key is set: only the demo
    /// (`flowctl up --demo`) allows it.
    #[arg(skip)]
    pub plaintext_allowed: bool,
}

impl std::fmt::Debug for SecretVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretVault")
            .field("master_key", &self.master_key.as_ref().map(|_| "<set>"))
            .field("plaintext_allowed", &self.plaintext_allowed)
            .finish()
    }
}

/// Prefix of a secret sealed without its endpoint id (before the binding).
const SEALED_V1: &str = "enc:v1:";
/// Prefix of a secret sealed with its endpoint id as associated data.
const SEALED_V2: &str = "enc:v2:";

/// Why a secret could not be sealed or opened, or the master key is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    /// No master key, and plain text is not allowed.
    #[error(
        "WEBHOOK_SECRET_KEY is not set: webhook endpoint secrets are stored encrypted with it. \
         Make one with `flowctl webhooks generate-key` (or `openssl rand -base64 32`) and give the \
         same value to the API and every webhook-worker (only `flowctl up --demo` runs without one)"
    )]
    KeyMissing,
    /// The master key is not base64.
    #[error("WEBHOOK_SECRET_KEY must be base64 (of 32 bytes: `flowctl webhooks generate-key`)")]
    KeyNotBase64,
    /// The master key is not 32 bytes long.
    #[error("WEBHOOK_SECRET_KEY must be 32 bytes (`flowctl webhooks generate-key`)")]
    KeyLength,
    /// Encryption failed.
    #[error("could not encrypt the secret")]
    Encrypt,
    /// A sealed secret was read without a master key.
    #[error("the secret is encrypted but WEBHOOK_SECRET_KEY is not configured")]
    NoKey,
    /// The stored form is not what [`SecretVault::seal`] writes.
    #[error("the stored secret is corrupt")]
    Corrupt,
    /// The master key does not open the secret (another key, a changed ciphertext, or one sealed
    /// for another endpoint).
    #[error("the secret cannot be decrypted with WEBHOOK_SECRET_KEY for this endpoint")]
    Decrypt,
}

/// How a secret is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredForm {
    /// In plain text (stored before a key was required, or by the demo).
    Plain,
    /// Sealed without its endpoint id.
    SealedV1,
    /// Sealed for its endpoint: the current form.
    SealedV2,
}

impl StoredForm {
    /// The form of `stored`.
    pub fn of(stored: &str) -> Self {
        if stored.starts_with(SEALED_V2) {
            Self::SealedV2
        } else if stored.starts_with(SEALED_V1) {
            Self::SealedV1
        } else {
            Self::Plain
        }
    }
}

/// A master key generated now: base64 of 32 random bytes, as `WEBHOOK_SECRET_KEY` takes it.
pub fn generate_master_key() -> String {
    BASE64.encode(rand::random::<[u8; 32]>())
}

impl SecretVault {
    /// A vault with `master_key`, plain text refused.
    pub fn with_key(master_key: impl Into<String>) -> Self {
        Self {
            master_key: Some(master_key.into()),
            plaintext_allowed: false,
        }
    }

    fn cipher(&self) -> Result<Option<aes_gcm::Aes256Gcm>, VaultError> {
        use aes_gcm::KeyInit as _;
        let Some(key) = self
            .master_key
            .as_deref()
            .filter(|key| !key.trim().is_empty())
        else {
            return Ok(None);
        };
        let bytes = BASE64
            .decode(key.trim())
            .map_err(|_| VaultError::KeyNotBase64)?;
        aes_gcm::Aes256Gcm::new_from_slice(&bytes)
            .map(Some)
            .map_err(|_| VaultError::KeyLength)
    }

    /// Fails at start-up on a missing (outside the demo) or malformed key rather than at the
    /// first secret.
    pub fn check(&self) -> Result<(), VaultError> {
        match self.cipher()? {
            None if !self.plaintext_allowed => Err(VaultError::KeyMissing),
            _ => Ok(()),
        }
    }

    /// The form to store `secret` of `endpoint` in: sealed for that endpoint, or as it is in the
    /// demo without a key.
    pub fn seal(&self, endpoint: WebhookEndpointId, secret: &str) -> Result<String, VaultError> {
        self.seal_bound(&endpoint.to_string(), secret)
    }

    /// The form to store `secret` in, sealed for `binding` (the id of what owns it, e.g. an
    /// event source's `evs_…`): a sealed secret moved to another owner does not open.
    pub fn seal_bound(&self, binding: &str, secret: &str) -> Result<String, VaultError> {
        use aes_gcm::aead::{Aead as _, Payload};
        let Some(cipher) = self.cipher()? else {
            return match self.plaintext_allowed {
                true => Ok(secret.to_owned()),
                false => Err(VaultError::KeyMissing),
            };
        };
        let nonce: [u8; 12] = rand::random();
        let associated = binding;
        let mut sealed = nonce.to_vec();
        sealed.extend(
            cipher
                .encrypt(
                    &aes_gcm::Nonce::from(nonce),
                    Payload {
                        msg: secret.as_bytes(),
                        aad: associated.as_bytes(),
                    },
                )
                .map_err(|_| VaultError::Encrypt)?,
        );
        Ok(format!("{SEALED_V2}{}", BASE64.encode(sealed)))
    }

    /// The secret of `endpoint` from its stored form (any of [`StoredForm`]).
    pub fn open(&self, endpoint: WebhookEndpointId, stored: &str) -> Result<String, VaultError> {
        self.open_bound(&endpoint.to_string(), stored)
    }

    /// The secret sealed for `binding` (see [`SecretVault::seal_bound`]) from its stored form.
    pub fn open_bound(&self, binding: &str, stored: &str) -> Result<String, VaultError> {
        use aes_gcm::aead::{Aead as _, Payload};
        let (encoded, associated) = match StoredForm::of(stored) {
            StoredForm::Plain => return Ok(stored.to_owned()),
            StoredForm::SealedV1 => (&stored[SEALED_V1.len()..], ""),
            StoredForm::SealedV2 => (&stored[SEALED_V2.len()..], binding),
        };
        let cipher = self.cipher()?.ok_or(VaultError::NoKey)?;
        let sealed = BASE64.decode(encoded).map_err(|_| VaultError::Corrupt)?;
        if sealed.len() < 12 {
            return Err(VaultError::Corrupt);
        }
        let (nonce, ciphertext) = sealed.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| VaultError::Corrupt)?;
        let plain = cipher
            .decrypt(
                &aes_gcm::Nonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: associated.as_bytes(),
                },
            )
            .map_err(|_| VaultError::Decrypt)?;
        String::from_utf8(plain).map_err(|_| VaultError::Corrupt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_domain::webhook::signing::{SECRET_PREFIX, generate_secret};

    /// Secrets sealed before the move to aes-gcm 0.11 and before the binding to endpoints must
    /// still open: this one was sealed by an independent AES-256-GCM implementation (Python's
    /// `cryptography`) with the same layout (12-byte nonce, then ciphertext and tag), no
    /// associated data.
    #[test]
    fn secrets_sealed_by_standard_aes_256_gcm_open_and_new_ones_round_trip() {
        let vault = SecretVault::with_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=");
        let endpoint = WebhookEndpointId::new();
        let sealed = "enc:v1:ZGVmZ2hpamtsbW5vP3OtAxq2NfFTEj6cDtsZyG45ZkSeR0YSOr29CQ==";
        assert_eq!(StoredForm::of(sealed), StoredForm::SealedV1);
        assert_eq!(vault.open(endpoint, sealed).unwrap(), "whsec_compat");
        let mut tampered = sealed.to_owned();
        tampered.replace_range(20..21, "A");
        assert!(
            vault.open(endpoint, &tampered).is_err(),
            "a changed ciphertext is refused"
        );
        let resealed = vault.seal(endpoint, "whsec_new").unwrap();
        assert!(resealed.starts_with(SEALED_V2));
        assert_eq!(vault.open(endpoint, &resealed).unwrap(), "whsec_new");
    }

    #[test]
    fn a_sealed_secret_opens_only_for_its_own_endpoint() {
        let vault = SecretVault::with_key(generate_master_key());
        let (mine, other) = (WebhookEndpointId::new(), WebhookEndpointId::new());
        let sealed = vault.seal(mine, "whsec_mine").unwrap();
        assert_eq!(vault.open(mine, &sealed).unwrap(), "whsec_mine");
        assert_eq!(vault.open(other, &sealed), Err(VaultError::Decrypt));
    }

    #[test]
    fn secrets_are_sealed_with_the_master_key_and_opened_again() {
        let vault = SecretVault::with_key(BASE64.encode([7u8; 32]));
        let endpoint = WebhookEndpointId::new();
        let secret = generate_secret();
        let sealed = vault.seal(endpoint, &secret).unwrap();
        assert!(sealed.starts_with(SEALED_V2));
        assert!(!sealed.contains(&secret[SECRET_PREFIX.len()..]));
        assert_ne!(
            sealed,
            vault.seal(endpoint, &secret).unwrap(),
            "a fresh nonce each time"
        );
        assert_eq!(vault.open(endpoint, &sealed).unwrap(), secret);
        // Secrets stored before a key was required still read.
        assert_eq!(vault.open(endpoint, &secret).unwrap(), secret);
        let other = SecretVault::with_key(BASE64.encode([8u8; 32]));
        assert!(other.open(endpoint, &sealed).is_err());
        let short = SecretVault::with_key(BASE64.encode([1u8; 16]));
        assert_eq!(short.check(), Err(VaultError::KeyLength));
    }

    #[test]
    fn without_a_key_only_the_demo_runs_and_stores_plain_text() {
        let none = SecretVault {
            master_key: None,
            plaintext_allowed: false,
        };
        let endpoint = WebhookEndpointId::new();
        assert_eq!(none.check(), Err(VaultError::KeyMissing));
        assert!(
            none.check()
                .unwrap_err()
                .to_string()
                .contains("flowctl webhooks generate-key")
        );
        assert_eq!(none.seal(endpoint, "whsec_x"), Err(VaultError::KeyMissing));
        let demo = SecretVault {
            master_key: None,
            plaintext_allowed: true,
        };
        assert_eq!(demo.check(), Ok(()));
        assert_eq!(demo.seal(endpoint, "whsec_x").unwrap(), "whsec_x");
        let sealed = SecretVault::with_key(generate_master_key())
            .seal(endpoint, "whsec_x")
            .unwrap();
        assert_eq!(demo.open(endpoint, &sealed), Err(VaultError::NoKey));
    }
}
