//! The Tauri side: the one window, the tray icon, what closing the window does, and quitting on
//! SIGTERM/SIGINT. The page itself always comes from a Rigdeck server over http, so the window gets
//! no IPC permissions at all (there are no capability files).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use tauri::menu::{Menu, MenuEvent, MenuItem};
use tauri::tray::{TrayIcon, TrayIconBuilder};
use tauri::{
    AppHandle, Manager, RunEvent, Url, WebviewUrl, WebviewWindowBuilder, Window, WindowEvent,
};
use tokio::signal::unix::Signal;
use tokio::sync::oneshot;

use crate::backend::Backend;
use crate::instance::FocusServer;
use crate::locale;

/// The label of the only window.
pub const MAIN_WINDOW: &str = "main";
const MENU_OPEN: &str = "open";
const MENU_QUIT: &str = "quit";

/// What the window shows, known once the server is up.
pub struct Session {
    /// The page the window opens first: a `/login?token=…` URL that signs it in and redirects to the UI.
    pub start_url: Url,
    /// The in-process server (local mode); `None` when showing a remote rig.
    pub backend: Option<Backend>,
    /// Fires if the in-process server stops by itself.
    pub server_failed: Option<oneshot::Receiver<anyhow::Error>>,
    /// Answers a second `rigdeck-desktop` (the caller keeps the lock itself).
    pub focus_server: Option<FocusServer>,
}

/// Tauri and GTK, initialised, with no window yet.
pub struct Shell {
    app: tauri::App,
    /// Handed to the setup hook, which runs inside [`Shell::run`].
    session: Arc<Mutex<Option<Session>>>,
    /// For the close handler, which is registered before the server exists.
    backend: Arc<OnceLock<Backend>>,
}

impl Shell {
    /// Initialises GTK and Tauri. Done before the server starts, so that a display that cannot be
    /// opened fails at once, before anything is started. `signals` (SIGTERM, SIGINT) quit the app.
    pub fn new(signals: Vec<(&'static str, Signal)>) -> anyhow::Result<Self> {
        let session: Arc<Mutex<Option<Session>>> = Arc::default();
        let backend: Arc<OnceLock<Backend>> = Arc::default();
        let setup_session = session.clone();
        let close_backend = backend.clone();
        let builder = tauri::Builder::default()
            .on_window_event(move |window, event| {
                on_window_event(window, event, close_backend.get())
            })
            .setup(move |app| {
                // Failures here are reported and end the app with an error instead of returning
                // Err, which Tauri would turn into a panic.
                let handle = app.handle().clone();
                watch_signals(&handle, signals);
                let session = setup_session
                    .lock()
                    .map(|mut slot| slot.take())
                    .ok()
                    .flatten();
                let Some(session) = session else {
                    eprintln!(
                        "rigdeck-desktop: internal error: the window started without a server"
                    );
                    handle.exit(1);
                    return Ok(());
                };
                start_session(&handle, session);
                Ok(())
            });
        // GTK's initialisation panics when the display cannot be opened: catch that (quietly) and
        // turn it into an error that says what to check.
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let built = std::panic::catch_unwind(AssertUnwindSafe(|| {
            builder.build(tauri::generate_context!())
        }));
        std::panic::set_hook(default_hook);
        let app = built
            .map_err(|payload| {
                let reason = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                anyhow::anyhow!(
                    "cannot open a window on this display (DISPLAY={:?}, WAYLAND_DISPLAY={:?}): {reason}",
                    std::env::var("DISPLAY").unwrap_or_default(),
                    std::env::var("WAYLAND_DISPLAY").unwrap_or_default()
                )
            })?
            .context("cannot start the desktop window")?;
        Ok(Self {
            app,
            session,
            backend,
        })
    }

    /// Opens the window on `session` and runs until the app quits; returns the exit code. The
    /// caller stops the server afterwards.
    pub fn run(self, session: Session) -> i32 {
        if let Some(backend) = &session.backend {
            let _ = self.backend.set(backend.clone());
        }
        match self.session.lock() {
            Ok(mut slot) => *slot = Some(session),
            Err(_) => {
                eprintln!("rigdeck-desktop: internal error: cannot hand the server to the window");
                return 1;
            }
        }
        self.app.run_return(|_, event| {
            if let RunEvent::ExitRequested {
                code: Some(code), ..
            } = event
            {
                tracing::debug!("exit requested with code {code}");
            }
        })
    }
}

/// Opens the window, answers later instances, adds the tray, and watches the server.
fn start_session(handle: &AppHandle, session: Session) {
    let Session {
        start_url,
        backend,
        server_failed,
        focus_server,
    } = session;
    if let Err(err) = open_window(handle, start_url) {
        eprintln!("rigdeck-desktop: cannot open the window: {err:#}");
        handle.exit(1);
        return;
    }
    if let Some(focus_server) = focus_server {
        let focus_handle = handle.clone();
        if let Err(err) = focus_server.spawn(move || show_main_window(&focus_handle)) {
            tracing::warn!(
                "a second `rigdeck-desktop` will not be able to reopen this window: {err:#}"
            );
        }
    }
    if backend.is_some() {
        add_tray(handle);
    }
    if let Some(failed) = server_failed {
        let handle = handle.clone();
        tauri::async_runtime::spawn(async move {
            if let Ok(err) = failed.await {
                eprintln!("rigdeck-desktop: the Rigdeck server stopped: {err:#}");
                handle.exit(1);
            }
        });
    }
}

/// Opens the window on the bundled "Starting Rigdeck…" page, then points it at `url` once the
/// webview is set up (see [`load`]).
fn open_window(app: &AppHandle, url: Url) -> tauri::Result<()> {
    let window = WebviewWindowBuilder::new(app, MAIN_WINDOW, WebviewUrl::App("index.html".into()))
        .title("Rigdeck")
        .inner_size(1280.0, 860.0)
        .min_inner_size(720.0, 480.0)
        .build()?;
    window.with_webview(move |webview| load(webview, &url))?;
    Ok(())
}

/// WebKitGTK derives `navigator.language` from the C library's locale, and for `C.UTF-8` (the
/// default on minimal Debian/Ubuntu installs, containers and many headless rigs) that gives "C",
/// which is not a language tag: the UI's chart library then throws at start-up
/// (`new Intl.NumberFormat(navigator.language)`) and the window stays blank. Tell WebKit a real
/// language in that case, before the UI loads.
#[cfg(target_os = "linux")]
fn load(webview: tauri::webview::PlatformWebview, url: &Url) {
    use webkit2gtk::{WebContextExt, WebViewExt};
    let view = webview.inner();
    if let Some(language) = locale::fallback_language() {
        match view.context() {
            Some(context) => context.set_preferred_languages(&[language]),
            None => tracing::warn!("cannot set the page language: the webview has no context"),
        }
    }
    view.load_uri(url.as_str());
}

#[cfg(not(target_os = "linux"))]
fn load(webview: tauri::webview::PlatformWebview, url: &Url) {
    let _ = webview;
    tracing::error!("cannot open {url}: only Linux is supported");
}

/// Shows, unminimises and focuses the window (a second `rigdeck-desktop`, or the tray's "Open Rigdeck").
fn show_main_window(app: &AppHandle) {
    let Some(window) = app.get_webview_window(MAIN_WINDOW) else {
        tracing::warn!("asked to show the window, but it does not exist");
        return;
    };
    for (what, outcome) in [
        ("show", window.show()),
        ("unminimize", window.unminimize()),
        ("focus", window.set_focus()),
    ] {
        if let Err(err) = outcome {
            tracing::warn!("cannot {what} the window: {err}");
        }
    }
}

fn on_window_event(window: &Window, event: &WindowEvent, backend: Option<&Backend>) {
    let WindowEvent::CloseRequested { api, .. } = event else {
        return;
    };
    if window.label() != MAIN_WINDOW {
        return;
    }
    // Read the setting now: the user may have changed it in the UI since the window opened.
    if backend.is_some_and(Backend::keep_running_in_background) {
        api.prevent_close();
        if let Err(err) = window.hide() {
            tracing::warn!("cannot hide the window: {err}");
        }
        let how = if window.app_handle().try_state::<TrayIcon>().is_some() {
            "use the tray icon to reopen the window or quit"
        } else {
            "run `rigdeck` again to reopen the window"
        };
        eprintln!("Rigdeck keeps running in the background (see Settings): {how}.");
    }
    // Otherwise the window closes; with no window left Tauri ends the event loop, and main()
    // then stops the server (flushing its history), so no daemon is left behind.
}

/// The tray icon lets a window hidden by "keep running in the background" be reopened or quit.
/// It needs libayatana-appindicator3 (or libappindicator3) at run time; without it the app still
/// works and a second `rigdeck-desktop` reopens the window.
fn add_tray(app: &AppHandle) {
    if !session_bus_available() {
        // The indicator talks to the panel over the session bus; without one it would only try to
        // autolaunch a bus daemon (which would outlive us) and warn.
        tracing::info!(
            "no tray icon: no D-Bus session bus; run `rigdeck` again to reopen a hidden window"
        );
        return;
    }
    if !appindicator_available() {
        tracing::info!("no tray icon: libayatana-appindicator3 is not installed");
        return;
    }
    match build_tray(app) {
        // Kept in state: dropping the handle would remove the icon.
        Ok(tray) => {
            app.manage(tray);
        }
        Err(err) => tracing::warn!("no tray icon: {err}"),
    }
}

fn build_tray(app: &AppHandle) -> tauri::Result<TrayIcon> {
    let open = MenuItem::with_id(app, MENU_OPEN, "Open Rigdeck", true, None::<&str>)?;
    let quit = MenuItem::with_id(app, MENU_QUIT, "Quit", true, None::<&str>)?;
    let menu = Menu::with_items(app, &[&open, &quit])?;
    let mut tray = TrayIconBuilder::with_id("rigdeck")
        .tooltip("Rigdeck")
        .menu(&menu)
        .on_menu_event(on_tray_menu);
    if let Some(icon) = app.default_window_icon() {
        tray = tray.icon(icon.clone());
    }
    tray.build(app)
}

fn on_tray_menu(app: &AppHandle, event: MenuEvent) {
    match event.id().as_ref() {
        MENU_OPEN => show_main_window(app),
        MENU_QUIT => app.exit(0),
        _ => {}
    }
}

/// Where GLib looks for the session bus: the environment, then the systemd user bus socket.
fn session_bus_available() -> bool {
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|address| !address.is_empty()) {
        return true;
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|dir| std::path::Path::new(&dir).join("bus").exists())
}

/// The tray crate panics when it cannot load the indicator library, so look for it first.
fn appindicator_available() -> bool {
    const NAMES: [&std::ffi::CStr; 4] = [
        c"libayatana-appindicator3.so.1",
        c"libappindicator3.so.1",
        c"libayatana-appindicator3.so",
        c"libappindicator3.so",
    ];
    NAMES.iter().any(|name| {
        // SAFETY: dlopen gets a valid NUL-terminated name; the handle is closed right away. Loading
        // the library runs its constructors, which the tray would run anyway.
        unsafe {
            let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if handle.is_null() {
                false
            } else {
                libc::dlclose(handle);
                true
            }
        }
    })
}

/// SIGTERM (systemd, `kill`) and SIGINT (Ctrl+C in the terminal that started the app) quit like the
/// tray's Quit: the event loop ends and main() stops the server cleanly.
fn watch_signals(app: &AppHandle, signals: Vec<(&'static str, Signal)>) {
    for (name, mut signal) in signals {
        let app = app.clone();
        tauri::async_runtime::spawn(async move {
            if signal.recv().await.is_some() {
                tracing::info!("{name} received: quitting");
                app.exit(0);
            }
        });
    }
}
