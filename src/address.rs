//! Addresses of cluster roles as users type them: `HOST:PORT` and `df://HOST:PORT`. (Here, not
//! in `distributed`, so a binary built without the cluster still checks `--remote`'s syntax.)

/// The scheduler port of the examples (Ballista's default).
pub const DEFAULT_SCHEDULER_PORT: u16 = 50050;

/// `HOST:PORT` (IPv6 hosts in brackets) → (host, port), the port from 1 to 65535.
pub fn parse_host_port(address: &str) -> Result<(String, u16), String> {
    let parsed = address.rsplit_once(':').and_then(|(host, port)| {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
        let plausible = !host.is_empty() && !host.contains(['/', ' ', '@']);
        plausible.then(|| (host.to_string(), port))
    });
    parsed.ok_or_else(|| {
        format!("'{address}': expected HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:{DEFAULT_SCHEDULER_PORT}")
    })
}

/// `df://HOST:PORT` (a trailing `/` allowed) → `HOST:PORT`.
pub fn parse_remote_url(url: &str) -> Result<String, String> {
    let Some(rest) = url.strip_prefix("df://") else {
        return Err(format!(
            "'{url}': expected the scheduler's address as df://HOST:PORT, e.g. \
             df://127.0.0.1:{DEFAULT_SCHEDULER_PORT}"
        ));
    };
    let (host, port) = parse_host_port(rest.trim_end_matches('/'))
        .map_err(|_| format!("'{url}': expected df://HOST:PORT with a port from 1 to 65535"))?;
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls() {
        assert_eq!(
            parse_remote_url("df://127.0.0.1:50050").unwrap(),
            "127.0.0.1:50050"
        );
        assert_eq!(parse_remote_url("df://host:1/").unwrap(), "host:1");
        for bad in [
            "127.0.0.1:50050",
            "http://h:1",
            "df://h",
            "df://h:0",
            "df://h:x",
            "df://:5",
            "df://h:70000",
        ] {
            let error = parse_remote_url(bad).unwrap_err();
            assert!(error.contains(bad), "{error}");
        }
        assert!(parse_host_port("localhost:50050").is_ok());
        assert!(parse_host_port("[::1]:50050").is_ok());
        assert!(parse_host_port("localhost").is_err());
    }
}
