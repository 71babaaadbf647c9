//! This machine's network interfaces and their addresses (read with `getifaddrs`), and which
//! addresses are private: the only ones a multi-node engine's unencrypted traffic may use.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One interface and its addresses, IPv4 first.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetworkInterface {
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

/// Every interface that has at least one address, by name.
pub fn list() -> std::io::Result<Vec<NetworkInterface>> {
    let mut by_name: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that stays valid until freeifaddrs; every
    // pointer read below comes from that list and is checked for null first.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut at = head;
        while !at.is_null() {
            let entry = &*at;
            if let Some(address) = socket_address(entry.ifa_addr) {
                let name = std::ffi::CStr::from_ptr(entry.ifa_name)
                    .to_string_lossy()
                    .into_owned();
                by_name.entry(name).or_default().push(address);
            }
            at = entry.ifa_next;
        }
        libc::freeifaddrs(head);
    }
    Ok(by_name
        .into_iter()
        .map(|(name, mut addresses)| {
            addresses.sort_by_key(|a| a.is_ipv6());
            NetworkInterface { name, addresses }
        })
        .collect())
}

/// An IPv4 or IPv6 address from a `sockaddr` of the list; `None` for other families.
///
/// # Safety
/// `address` is null or points to a `sockaddr` of `getifaddrs`'s list.
unsafe fn socket_address(address: *const libc::sockaddr) -> Option<IpAddr> {
    if address.is_null() {
        return None;
    }
    match i32::from((*address).sa_family) {
        libc::AF_INET => {
            let v4 = &*(address.cast::<libc::sockaddr_in>());
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            let v6 = &*(address.cast::<libc::sockaddr_in6>());
            Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// Private to a site: RFC 1918, loopback, link-local, carrier-grade NAT and VPN overlays
/// (100.64.0.0/10, Tailscale's range), IPv6 unique-local (fd00::/8). Anything else is public.
pub fn is_private(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback() || (first & 0xffc0) == 0xfe80 || (first & 0xff00) == 0xfd00
        }
    }
}

/// Why an interface cannot carry a multi-node engine's traffic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceProblem {
    #[error("there is no network interface '{name}' (there are: {known}): pick one of those")]
    Missing { name: String, known: String },
    #[error("interface '{name}' has no address: bring it up with one (ip addr add …)")]
    NoAddress { name: String },
    #[error("interface '{name}' has {address}, a public address: the engine's traffic (NCCL, Gloo, torch.distributed) is not encrypted and cannot be tunnelled, so it goes only over a private network (10/8, 172.16/12, 192.168/16, 100.64/10, link-local, fd00::/8): pick such an interface")]
    Public { name: String, address: IpAddr },
    #[error("cannot read the network interfaces: {0}")]
    Unreadable(String),
}

/// The address the engine uses on interface `name` of this machine: its first private address
/// (IPv4 before IPv6); refused when it has only public ones, or does not exist.
pub fn private_address(name: &str) -> Result<IpAddr, InterfaceProblem> {
    let interfaces = list().map_err(|err| InterfaceProblem::Unreadable(err.to_string()))?;
    private_address_in(&interfaces, name)
}

/// [`private_address`] over a given list.
pub fn private_address_in(
    interfaces: &[NetworkInterface],
    name: &str,
) -> Result<IpAddr, InterfaceProblem> {
    let Some(interface) = interfaces.iter().find(|i| i.name == name) else {
        return Err(InterfaceProblem::Missing {
            name: name.to_owned(),
            known: interfaces
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    if let Some(address) = interface.addresses.iter().find(|a| is_private(**a)) {
        return Ok(*address);
    }
    match interface.addresses.first() {
        Some(address) => Err(InterfaceProblem::Public {
            name: name.to_owned(),
            address: *address,
        }),
        None => Err(InterfaceProblem::NoAddress {
            name: name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn private_ranges_pass_and_public_ones_do_not() {
        for private in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.1.10",
            "127.0.0.1",
            "169.254.3.4",
            "100.64.0.1",
            "100.127.255.254",
            "::1",
            "fe80::1",
            "fd12:3456::1",
        ] {
            assert!(is_private(ip(private)), "{private}");
        }
        for public in [
            "8.8.8.8",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "192.0.2.2",
            "198.51.100.7",
            "2001:db8::1",
            "fc00::1",
        ] {
            assert!(!is_private(ip(public)), "{public}");
        }
    }

    #[test]
    fn an_interface_gives_its_private_address_or_says_why_not() {
        let interfaces = vec![
            NetworkInterface {
                name: "eth0".into(),
                addresses: vec![ip("203.0.113.9"), ip("fd00::2")],
            },
            NetworkInterface {
                name: "wan".into(),
                addresses: vec![ip("203.0.113.10")],
            },
        ];
        assert_eq!(private_address_in(&interfaces, "eth0"), Ok(ip("fd00::2")));
        let public = private_address_in(&interfaces, "wan").unwrap_err();
        assert!(public
            .to_string()
            .contains("203.0.113.10, a public address"));
        let missing = private_address_in(&interfaces, "eth9").unwrap_err();
        assert!(missing.to_string().contains("(there are: eth0, wan)"));
    }

    #[test]
    fn this_machine_has_loopback_with_a_private_address() {
        let interfaces = list().unwrap();
        assert_eq!(private_address_in(&interfaces, "lo"), Ok(ip("127.0.0.1")));
    }
}
