//! Build script: lets Tauri read `tauri.conf.json`, embed the icons and generate the (empty) permission set.

fn main() {
    tauri_build::build();
}
