//! SCRAM-SHA-256 (RFC 5802, RFC 7677) against verifiers in PostgreSQL's format.
//!
//! A verifier is `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64), what
//! `pg_authid.rolpassword` holds: the server can check a client's proof and prove itself
//! without knowing the password or anything that logs in as the user. pgwire's own SCRAM
//! server needs the salted password instead, so the exchange is here; the primitives (HMAC,
//! SHA-256, PBKDF2, randomness, constant-time comparison) are ring's, SASLprep is
//! `stringprep`'s.
//!
//! Channel binding (SCRAM-SHA-256-PLUS) is not offered; a client that supports it answers
//! `y,,` and is accepted, as RFC 5802 says.

use std::fmt;
use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

/// The iteration count of new verifiers: PostgreSQL's default (`scram_iterations`).
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// Bytes of salt of new verifiers, as PostgreSQL makes them.
const SALT_LEN: usize = 16;
/// Bytes of the server's part of the nonce.
const NONCE_LEN: usize = 18;

/// What the server keeps of a password.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Nothing that helps an attacker in logs.
        f.debug_struct("Verifier")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Verifier {
    /// PostgreSQL's text form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

impl std::str::FromStr for Verifier {
    type Err = String;

    fn from_str(text: &str) -> Result<Verifier, String> {
        const EXPECTED: &str =
            "expected SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey> (from calibsql \
             hash-password)";
        let rest = text
            .strip_prefix("SCRAM-SHA-256$")
            .ok_or_else(|| EXPECTED.to_string())?;
        let (iterations_salt, keys) = rest.split_once('$').ok_or_else(|| EXPECTED.to_string())?;
        let (iterations, salt) = iterations_salt
            .split_once(':')
            .ok_or_else(|| EXPECTED.to_string())?;
        let (stored_key, server_key) = keys.split_once(':').ok_or_else(|| EXPECTED.to_string())?;
        let iterations: u32 = iterations
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("bad iteration count '{iterations}'; {EXPECTED}"))?;
        let salt = BASE64
            .decode(salt)
            .map_err(|_| format!("the salt is not base64; {EXPECTED}"))?;
        let key = |name: &str, text: &str| -> Result<[u8; 32], String> {
            BASE64
                .decode(text)
                .ok()
                .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                .ok_or_else(|| format!("the {name} is not 32 bytes of base64; {EXPECTED}"))
        };
        Ok(Verifier {
            iterations,
            salt,
            stored_key: key("StoredKey", stored_key)?,
            server_key: key("ServerKey", server_key)?,
        })
    }
}

impl Verifier {
    /// The verifier of `password` with `salt` and `iterations`.
    pub fn new(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        // SASLprep as PostgreSQL does: a password it cannot normalize is used as it is.
        let prepared = stringprep::saslprep(password)
            .map(|p| p.into_owned())
            .unwrap_or_else(|_| password.to_string());
        let mut salted = [0u8; 32];
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            NonZeroU32::new(iterations).expect("iterations > 0"),
            salt,
            prepared.as_bytes(),
            &mut salted,
        );
        let client_key = hmac_sha256(&salted, b"Client Key");
        Verifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac_sha256(&salted, b"Server Key"),
        }
    }

    /// Whether `password` is the one this verifier was made from, for logins that send the
    /// password itself (Flight SQL's Basic handshake, inside TLS): SaltedPassword by PBKDF2
    /// with this verifier's salt and iterations, then ClientKey and StoredKey, compared with
    /// this StoredKey in constant time. Takes as long as a SCRAM login (the PBKDF2 rounds).
    pub fn checks_password(&self, password: &str) -> bool {
        let candidate = Verifier::new(password, &self.salt, self.iterations.max(1));
        #[allow(deprecated)] // still ring 0.17's constant-time comparison
        let equal =
            ring::constant_time::verify_slices_are_equal(&candidate.stored_key, &self.stored_key);
        equal.is_ok()
    }

    /// A verifier of `password` with a new random salt.
    pub fn generate(password: &str) -> Result<Verifier, String> {
        let mut salt = [0u8; SALT_LEN];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| "no randomness available for the salt".to_string())?;
        Ok(Verifier::new(password, &salt, DEFAULT_ITERATIONS))
    }
}

/// A random nonce part (base64 of random bytes: printable, no comma).
pub fn random_nonce() -> Result<String, String> {
    let mut bytes = [0u8; NONCE_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "no randomness available for the nonce".to_string())?;
    Ok(BASE64.encode(bytes))
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, message)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

fn sha256(data: &[u8]) -> [u8; 32] {
    digest::digest(&digest::SHA256, data)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

/// Why an exchange failed. Only [`Failure::WrongPassword`] is about the password; the
/// others are malformed messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Malformed(&'static str),
    ChannelBinding,
    WrongPassword,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Malformed(what) => write!(f, "malformed SCRAM message: {what}"),
            Failure::ChannelBinding => f.write_str(
                "SCRAM channel binding is not supported by this server (use \
                 channel_binding=prefer or disable)",
            ),
            Failure::WrongPassword => f.write_str("wrong password"),
        }
    }
}

/// The server's side after it answered the client's first message.
#[derive(Debug)]
pub struct ServerFirst {
    /// What the server sends (`r=…,s=…,i=…`).
    pub message: String,
    gs2_header: String,
    client_first_bare: String,
    nonce: String,
}

/// Answers `client_first` (`n,,n=user,r=nonce`) with the salt and iterations of `verifier`
/// and the server's nonce part `server_nonce`.
pub fn server_first(
    client_first: &str,
    verifier: &Verifier,
    server_nonce: &str,
) -> Result<ServerFirst, Failure> {
    // gs2-header = gs2-cbind-flag "," [authzid] ","
    let mut parts = client_first.splitn(3, ',');
    let flag = parts.next().ok_or(Failure::Malformed("no GS2 header"))?;
    let authzid = parts.next().ok_or(Failure::Malformed("no GS2 header"))?;
    let bare = parts
        .next()
        .ok_or(Failure::Malformed("no client-first-message-bare"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(Failure::ChannelBinding),
        _ => return Err(Failure::Malformed("bad channel binding flag")),
    }
    if !authzid.is_empty() && !authzid.starts_with("a=") {
        return Err(Failure::Malformed("bad authorization identity"));
    }
    let gs2_header = format!("{flag},{authzid},");
    // client-first-message-bare = [reserved-mext ","] username "," nonce ["," extensions]
    let mut attributes = bare.split(',');
    let mut username = attributes
        .next()
        .ok_or(Failure::Malformed("no user name"))?;
    if username.starts_with("m=") {
        return Err(Failure::Malformed("mandatory extensions are not supported"));
    }
    if !username.starts_with("n=") {
        username = "";
    }
    let _ = username; // PostgreSQL takes the user of the startup message, and so do we.
    let client_nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .filter(|n| !n.is_empty())
        .ok_or(Failure::Malformed("no client nonce"))?;
    let nonce = format!("{client_nonce}{server_nonce}");
    let message = format!(
        "r={nonce},s={},i={}",
        BASE64.encode(&verifier.salt),
        verifier.iterations
    );
    Ok(ServerFirst {
        message,
        gs2_header,
        client_first_bare: bare.to_string(),
        nonce,
    })
}

impl ServerFirst {
    /// Checks the client's proof in `client_final` (`c=…,r=…,p=…`) against `verifier`;
    /// returns the server's final message (`v=…`) when it holds.
    pub fn server_final(&self, client_final: &str, verifier: &Verifier) -> Result<String, Failure> {
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or(Failure::Malformed("no proof"))?;
        let mut attributes = without_proof.split(',');
        let binding = attributes
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(Failure::Malformed("no channel binding"))?;
        let nonce = attributes
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(Failure::Malformed("no nonce"))?;
        if BASE64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(Failure::ChannelBinding);
        }
        if nonce != self.nonce {
            return Err(Failure::Malformed("the nonce changed"));
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| Failure::Malformed("the proof is not base64"))?;
        if proof.len() != 32 {
            return Err(Failure::Malformed("the proof is not 32 bytes"));
        }
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.message
        );
        let client_signature = hmac_sha256(&verifier.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof
            .iter()
            .zip(client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        #[allow(deprecated)] // still ring 0.17's constant-time comparison
        let equal = ring::constant_time::verify_slices_are_equal(
            &sha256(&client_key),
            &verifier.stored_key,
        )
        .is_ok();
        if !equal {
            return Err(Failure::WrongPassword);
        }
        let server_signature = hmac_sha256(&verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)))
    }
}

/// A verifier for users who do not exist, so that the exchange with them looks like one with
/// a real user (the salt derived from the name and a per-process secret) and fails at the
/// end, as PostgreSQL does.
pub fn mock_verifier(user: &str, secret: &[u8; 32]) -> Verifier {
    let salt = hmac_sha256(secret, user.as_bytes());
    Verifier {
        iterations: DEFAULT_ITERATIONS,
        salt: salt[..SALT_LEN].to_vec(),
        stored_key: hmac_sha256(secret, b"stored"),
        server_key: hmac_sha256(secret, b"server"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7677, section 3: user "user", password "pencil".
    const SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn pencil() -> Verifier {
        Verifier::new("pencil", &BASE64.decode(SALT).unwrap(), 4096)
    }

    #[test]
    fn rfc7677_exchange() {
        let verifier = pencil();
        let first = server_first(CLIENT_FIRST, &verifier, SERVER_NONCE).unwrap();
        assert_eq!(first.message, SERVER_FIRST);
        assert_eq!(
            first.server_final(CLIENT_FINAL, &verifier).unwrap(),
            SERVER_FINAL
        );
    }

    #[test]
    fn wrong_password_and_tampering_fail() {
        let other = Verifier::new("pencils", &BASE64.decode(SALT).unwrap(), 4096);
        let first = server_first(CLIENT_FIRST, &other, SERVER_NONCE).unwrap();
        assert_eq!(
            first.server_final(CLIENT_FINAL, &other),
            Err(Failure::WrongPassword)
        );
        let verifier = pencil();
        let first = server_first(CLIENT_FIRST, &verifier, SERVER_NONCE).unwrap();
        let other_nonce = CLIENT_FINAL.replace("k0,p=", "k1,p=");
        assert!(matches!(
            first.server_final(&other_nonce, &verifier),
            Err(Failure::Malformed(_))
        ));
        let bound = CLIENT_FINAL.replace("c=biws", "c=eSws");
        assert_eq!(
            first.server_final(&bound, &verifier),
            Err(Failure::ChannelBinding)
        );
        assert_eq!(
            server_first("p=tls-server-end-point,,n=user,r=abc", &verifier, "x").unwrap_err(),
            Failure::ChannelBinding
        );
    }

    #[test]
    fn a_password_checks_against_its_verifier_only() {
        let verifier = pencil();
        assert!(verifier.checks_password("pencil"));
        assert!(!verifier.checks_password("pencil "));
        assert!(!verifier.checks_password(""));
        let made = Verifier::generate("s3cret").unwrap();
        assert!(made.checks_password("s3cret"));
        assert!(!made.checks_password("S3cret"));
    }

    #[test]
    fn text_form_round_trips() {
        let verifier = pencil();
        let text = verifier.to_string();
        assert!(text.starts_with("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"));
        assert_eq!(text.parse::<Verifier>().unwrap(), verifier);
        assert!("md5abc".parse::<Verifier>().is_err());
        assert!("SCRAM-SHA-256$0:AAAA$AAAA:AAAA"
            .parse::<Verifier>()
            .is_err());
        // Debug shows no key material.
        assert!(!format!("{verifier:?}").contains("W22Z"));
    }

    #[test]
    fn postgresql_made_verifier_checks() {
        // Made by PostgreSQL 15: SET password_encryption = 'scram-sha-256';
        // CREATE ROLE analyst PASSWORD 'correct horse'; SELECT rolpassword FROM pg_authid.
        let verifier: Verifier = POSTGRES_VERIFIER.parse().unwrap();
        let computed = Verifier::new("correct horse", &verifier.salt, verifier.iterations);
        assert_eq!(computed, verifier);
    }

    const POSTGRES_VERIFIER: &str = "SCRAM-SHA-256$4096:aUsrvADzzkJNicSxZBmm5A==$\
        /dVPHkF+9VTwu1YNE9Fj4tOdrSgHF32gkXwQNAm+QAA=:IbCAxMWEDP8WfpxRasl4ElBNg0C7IzDlA3ztTl8UPWk=";
}
