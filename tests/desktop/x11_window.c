/* Finds a top-level X11 window by title and, on request, asks it to close the way a window
 * manager does when the user clicks the close button: a WM_PROTOCOLS / WM_DELETE_WINDOW client
 * message. GTK turns that into "delete-event", which Tauri reports as CloseRequested, so the app
 * runs exactly the code a real close runs. (xdotool's windowkill/windowclose destroy the window or
 * kill the client instead, and wmctrl needs a running window manager; Xvfb has none.)
 *
 * Usage: x11_window state TITLE   prints "viewable", "hidden", or "absent" (exit 0)
 *        x11_window close TITLE   sends WM_DELETE_WINDOW (exit 1 if no such window)
 * Build: cc -o x11_window x11_window.c -lX11
 */
#include <X11/Xatom.h>
#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int title_is(Display *dpy, Window w, const char *title) {
    int match = 0;
    Atom net_wm_name = XInternAtom(dpy, "_NET_WM_NAME", False);
    Atom utf8 = XInternAtom(dpy, "UTF8_STRING", False);
    Atom type;
    int format;
    unsigned long count, after;
    unsigned char *value = NULL;
    if (XGetWindowProperty(dpy, w, net_wm_name, 0, 1024, False, utf8, &type, &format, &count, &after, &value) ==
            Success &&
        value != NULL) {
        match = strcmp((const char *)value, title) == 0;
        XFree(value);
        if (match) return 1;
    }
    char *name = NULL;
    if (XFetchName(dpy, w, &name) && name != NULL) {
        match = strcmp(name, title) == 0;
        XFree(name);
    }
    return match;
}

/* Depth-first: without a window manager the client's top-level is a child of the root, but a
 * reparenting manager (if one ever runs) would put it one level deeper. */
static Window find(Display *dpy, Window parent, const char *title, int depth) {
    Window root, up, *children = NULL;
    unsigned int n = 0;
    Window found = None;
    if (!XQueryTree(dpy, parent, &root, &up, &children, &n)) return None;
    for (unsigned int i = 0; i < n && found == None; i++) {
        if (title_is(dpy, children[i], title)) found = children[i];
    }
    for (unsigned int i = 0; i < n && found == None && depth < 2; i++) {
        found = find(dpy, children[i], title, depth + 1);
    }
    if (children) XFree(children);
    return found;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "state") != 0 && strcmp(argv[1], "close") != 0)) {
        fprintf(stderr, "usage: %s state|close TITLE\n", argv[0]);
        return 2;
    }
    Display *dpy = XOpenDisplay(NULL);
    if (dpy == NULL) {
        fprintf(stderr, "x11_window: cannot open display %s\n", getenv("DISPLAY") ? getenv("DISPLAY") : "(unset)");
        return 2;
    }
    Window w = find(dpy, DefaultRootWindow(dpy), argv[2], 0);
    if (strcmp(argv[1], "state") == 0) {
        XWindowAttributes attrs;
        if (w == None || !XGetWindowAttributes(dpy, w, &attrs)) {
            puts("absent");
        } else {
            puts(attrs.map_state == IsViewable ? "viewable" : "hidden");
        }
        XCloseDisplay(dpy);
        return 0;
    }
    if (w == None) {
        fprintf(stderr, "x11_window: no window titled \"%s\"\n", argv[2]);
        XCloseDisplay(dpy);
        return 1;
    }
    XEvent event;
    memset(&event, 0, sizeof event);
    event.xclient.type = ClientMessage;
    event.xclient.window = w;
    event.xclient.message_type = XInternAtom(dpy, "WM_PROTOCOLS", False);
    event.xclient.format = 32;
    event.xclient.data.l[0] = (long)XInternAtom(dpy, "WM_DELETE_WINDOW", False);
    event.xclient.data.l[1] = CurrentTime;
    XSendEvent(dpy, w, False, NoEventMask, &event);
    XFlush(dpy);
    printf("0x%lx\n", (unsigned long)w);
    XCloseDisplay(dpy);
    return 0;
}
