//! Rebuilds the server when the web UI build (`ui/dist`) changes, so the embedded copy is current.

fn main() {
    println!("cargo:rerun-if-changed=../../ui/dist");
}
