//! The address policy that keeps webhook endpoints off internal networks (SSRF guard): which
//! addresses are public, and the checks of an endpoint URL, by form and once resolved.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use flow_domain::Invalid;

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
pub fn parse_endpoint_url(text: &str, policy: AddressPolicy) -> Result<url::Url, Invalid> {
    let not_http = || Invalid::new("url must be an absolute http(s) URL");
    if text.chars().count() > MAX_URL_CHARS {
        return Err(Invalid(format!(
            "url must be at most {MAX_URL_CHARS} characters"
        )));
    }
    let url = url::Url::parse(text.trim()).map_err(|_| not_http())?;
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_http => {}
        "http" => return Err(Invalid::new(PLAIN_HTTP)),
        _ => return Err(not_http()),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Invalid::new("url must not contain credentials"));
    }
    let literal = match url.host() {
        None => return Err(Invalid::new("url must have a host")),
        Some(url::Host::Ipv4(address)) => Some(IpAddr::V4(address)),
        Some(url::Host::Ipv6(address)) => Some(IpAddr::V6(address)),
        Some(url::Host::Domain(_)) => None,
    };
    if let Some(address) = literal
        && !policy.permits(address)
    {
        return Err(Invalid::new(REFUSED_ADDRESS));
    }
    Ok(url)
}

/// Why an endpoint address is refused, and the setting that allows it for local development.
pub const REFUSED_ADDRESS: &str = "url must not point to a loopback, private, link-local or \
     metadata address (for local development the service can allow them: set \
     WEBHOOK_ALLOW_PRIVATE=true on the API and the webhook-worker and restart them)";

/// Why a plain http endpoint is refused, and the setting that allows it for local development.
pub const PLAIN_HTTP: &str = "url must use https (for local development the service can allow \
     plain http: set WEBHOOK_ALLOW_HTTP=true on the API and the webhook-worker and restart them)";

/// [`parse_endpoint_url`], then resolves the host: every address it resolves to must be
/// permitted (checked again at each delivery, where only permitted addresses are connected to).
pub async fn check_endpoint_url(text: &str, policy: AddressPolicy) -> Result<url::Url, Invalid> {
    let url = parse_endpoint_url(text, policy)?;
    if let Some(url::Host::Domain(host)) = url.host() {
        let unresolved = || Invalid(format!("url host {host} could not be resolved"));
        let port = url.port_or_known_default().unwrap_or(443);
        let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|_| unresolved())?
            .collect();
        if addresses.is_empty() {
            return Err(unresolved());
        }
        if addresses
            .iter()
            .any(|address| !policy.permits(address.ip()))
        {
            return Err(Invalid::new(REFUSED_ADDRESS));
        }
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

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
                parse_endpoint_url(&format!("https://[{refused}]/hook"), strict)
                    .unwrap_err()
                    .0,
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
                .unwrap_err()
                .0,
            REFUSED_ADDRESS
        );
    }
}
