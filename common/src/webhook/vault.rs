//! Endpoint secrets sealed at rest: AES-256-GCM under a master key every API replica and
//! webhook-worker shares.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

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
/// Why a secret could not be sealed or opened, or the master key is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    /// The master key is not base64.
    #[error("WEBHOOK_SECRET_KEY must be base64")]
    KeyNotBase64,
    /// The master key is not 32 bytes long.
    #[error("WEBHOOK_SECRET_KEY must be 32 bytes")]
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
    /// The master key does not open the secret (another key, or a changed ciphertext).
    #[error("the secret cannot be decrypted with WEBHOOK_SECRET_KEY")]
    Decrypt,
}

impl SecretVault {
    fn cipher(&self) -> Result<Option<aes_gcm::Aes256Gcm>, VaultError> {
        use aes_gcm::KeyInit as _;
        let Some(key) = self.master_key.as_deref().filter(|key| !key.is_empty()) else {
            return Ok(None);
        };
        let bytes = BASE64
            .decode(key.trim())
            .map_err(|_| VaultError::KeyNotBase64)?;
        aes_gcm::Aes256Gcm::new_from_slice(&bytes)
            .map(Some)
            .map_err(|_| VaultError::KeyLength)
    }

    /// Fails at start-up on a malformed key rather than at the first secret.
    pub fn check(&self) -> Result<(), VaultError> {
        self.cipher().map(|_| ())
    }

    /// The form to store: sealed when a key is configured, else as it is.
    pub fn seal(&self, secret: &str) -> Result<String, VaultError> {
        use aes_gcm::aead::Aead as _;
        let Some(cipher) = self.cipher()? else {
            return Ok(secret.to_owned());
        };
        let nonce: [u8; 12] = rand::random();
        let mut sealed = nonce.to_vec();
        sealed.extend(
            cipher
                .encrypt(&aes_gcm::Nonce::from(nonce), secret.as_bytes())
                .map_err(|_| VaultError::Encrypt)?,
        );
        Ok(format!("{SEALED_PREFIX}{}", BASE64.encode(sealed)))
    }

    /// The secret from its stored form.
    pub fn open(&self, stored: &str) -> Result<String, VaultError> {
        use aes_gcm::aead::Aead as _;
        let Some(encoded) = stored.strip_prefix(SEALED_PREFIX) else {
            return Ok(stored.to_owned());
        };
        let cipher = self.cipher()?.ok_or(VaultError::NoKey)?;
        let sealed = BASE64.decode(encoded).map_err(|_| VaultError::Corrupt)?;
        if sealed.len() < 12 {
            return Err(VaultError::Corrupt);
        }
        let (nonce, ciphertext) = sealed.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| VaultError::Corrupt)?;
        let plain = cipher
            .decrypt(&aes_gcm::Nonce::from(nonce), ciphertext)
            .map_err(|_| VaultError::Decrypt)?;
        String::from_utf8(plain).map_err(|_| VaultError::Corrupt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_domain::webhook::signing::{SECRET_PREFIX, generate_secret};

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
}
