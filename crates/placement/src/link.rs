//! The network between boxes: a link's throughput and latency (measured, or a named kind of
//! Ethernet or Thunderbolt with typical real-world figures), and the boxes that lend devices to
//! the head box over llama.cpp's RPC backend.

use serde::{Deserialize, Serialize};

use super::options::{DeviceId, RpcServer};

/// A link from the head box to another box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// `2.5 GbE`, or `measured` for figures from a real link.
    pub name: String,
    /// What one TCP stream moves, bytes per second.
    pub throughput_bytes_per_s: u64,
    /// One way, through the kernel's TCP stack, seconds.
    pub latency_s: f64,
}

/// A named link: the id users type, its label, TCP goodput in Gbit/s and one-way latency in µs.
/// The figures are what iperf3 and ping typically show on such a link between two PCs with
/// their kernels' TCP stacks, not the line rate: 1 GbE moves about 941 Mbit/s, 2.5 GbE 2.35,
/// 10 GbE 9.4 (latencies from about 150 µs down to 25 µs); Thunderbolt/USB4 networking
/// (thunderbolt-net) reaches about 15 Gbit/s of its 40.
const NAMED: &[(&str, &str, f64, f64)] = &[
    ("1gbe", "1 GbE", 0.941, 150.0),
    ("2.5gbe", "2.5 GbE", 2.35, 120.0),
    ("5gbe", "5 GbE", 4.7, 100.0),
    ("10gbe", "10 GbE", 9.4, 50.0),
    ("25gbe", "25 GbE", 23.5, 25.0),
    ("usb4", "Thunderbolt / USB4 networking", 15.0, 60.0),
];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkError {
    #[error("unknown link '{0}': use one of {list}", list = Link::names().join(", "))]
    Unknown(String),
    #[error("a link of {0} bytes/s moves nothing: give the link's measured throughput (for example from iperf3), above 0")]
    NoThroughput(u64),
    #[error("a link's latency of {0} s is not a time: give one-way seconds, 0 or more (for example 0.00015)")]
    BadLatency(f64),
}

impl Link {
    /// The ids `named` takes: `1gbe`, `2.5gbe`, …
    pub fn names() -> Vec<&'static str> {
        NAMED.iter().map(|(id, ..)| *id).collect()
    }

    /// A named kind of link (`2.5gbe`, `10GbE`, `usb4`; case and spaces do not matter).
    pub fn named(id: &str) -> Result<Link, LinkError> {
        let wanted: String = id
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        let wanted = if wanted == "thunderbolt" || wanted == "tb4" {
            "usb4".to_owned()
        } else {
            wanted
        };
        NAMED
            .iter()
            .find(|(name, ..)| *name == wanted)
            .map(|&(_, label, gbit, latency_us)| Link {
                name: label.to_owned(),
                throughput_bytes_per_s: (gbit * 1e9 / 8.0) as u64,
                latency_s: latency_us * 1e-6,
            })
            .ok_or_else(|| LinkError::Unknown(id.to_owned()))
    }

    /// Figures measured on a real link.
    pub fn measured(throughput_bytes_per_s: u64, latency_s: f64) -> Result<Link, LinkError> {
        let link = Link {
            name: "measured".to_owned(),
            throughput_bytes_per_s,
            latency_s,
        };
        link.check()?;
        Ok(link)
    }

    /// A link a client sent is refused when it cannot carry anything or its latency is no time.
    pub fn check(&self) -> Result<(), LinkError> {
        if self.throughput_bytes_per_s == 0 {
            return Err(LinkError::NoThroughput(0));
        }
        if !self.latency_s.is_finite() || self.latency_s < 0.0 {
            return Err(LinkError::BadLatency(self.latency_s));
        }
        Ok(())
    }

    /// One crossing of `bytes`: the latency plus the bytes at the link's throughput.
    pub fn crossing_seconds(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.throughput_bytes_per_s.max(1) as f64
    }

    /// `2.5 GbE (294 MB/s, 0.12 ms)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}, {:.2} ms)",
            self.name,
            self.throughput_text(),
            self.latency_s * 1e3
        )
    }

    /// The throughput in MB/s with the digits that matter: `294 MB/s`, `3.5 MB/s`, `0.12 MB/s`.
    pub fn throughput_text(&self) -> String {
        let mb = self.throughput_bytes_per_s as f64 / 1e6;
        let decimals = if mb >= 10.0 {
            0
        } else if mb >= 1.0 {
            1
        } else {
            2
        };
        format!("{mb:.decimals$} MB/s")
    }
}

/// A box other than the head that lends devices over llama.cpp's RPC backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteBox {
    /// What the user calls it: a preset's id, or a paired rig's name.
    pub name: String,
    /// The `--rpc` endpoint of its server (`host:port`).
    pub endpoint: String,
    pub link: Link,
    /// The lent devices it holds, `RPC…` in llama.cpp's numbering.
    pub devices: Vec<DeviceId>,
}

/// The `--rpc` servers of `boxes`, in order, each with the devices it lends.
pub fn rpc_servers(boxes: &[RemoteBox]) -> Vec<RpcServer> {
    boxes
        .iter()
        .map(|b| RpcServer {
            endpoint: b.endpoint.clone(),
            devices: b.devices.len() as u32,
        })
        .collect()
}

/// Which box each lent device is on.
pub fn box_of(boxes: &[RemoteBox], device: DeviceId) -> Option<&RemoteBox> {
    boxes.iter().find(|b| b.devices.contains(&device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_link_keeps_its_digits() {
        let fast = Link::measured(294_000_000, 0.000_12).unwrap();
        assert_eq!(fast.describe(), "measured (294 MB/s, 0.12 ms)");
        assert_eq!(
            Link::measured(3_500_000, 0.001).unwrap().throughput_text(),
            "3.5 MB/s"
        );
        assert_eq!(
            Link::measured(100_000, 0.001).unwrap().throughput_text(),
            "0.10 MB/s"
        );
    }

    #[test]
    fn named_links_carry_real_world_figures_and_an_unknown_name_lists_them() {
        let link = Link::named("2.5GbE").unwrap();
        assert_eq!(link.name, "2.5 GbE");
        // 2.35 Gbit/s of goodput, not the 2.5 of the line.
        assert_eq!(link.throughput_bytes_per_s, 293_750_000);
        assert!((link.latency_s - 120e-6).abs() < 1e-12);
        assert!(Link::named("10 gbe").unwrap().throughput_bytes_per_s > 1_000_000_000);
        assert_eq!(
            Link::named("Thunderbolt").unwrap(),
            Link::named("usb4").unwrap()
        );
        let err = Link::named("3gbe").unwrap_err().to_string();
        assert!(
            err.contains("unknown link '3gbe'") && err.contains("1gbe, 2.5gbe"),
            "{err}"
        );
    }

    #[test]
    fn a_measured_link_needs_throughput_and_a_real_latency() {
        let err = Link::measured(0, 0.0001).unwrap_err().to_string();
        assert!(err.contains("0 bytes/s moves nothing"), "{err}");
        assert!(Link::measured(1, -1.0).is_err());
        assert!(Link::measured(1, f64::NAN).is_err());
        let link = Link::measured(100_000_000, 0.001).unwrap();
        // 1 ms of latency plus 1 MB at 100 MB/s.
        assert!((link.crossing_seconds(1_000_000) - 0.011).abs() < 1e-9);
    }
}
