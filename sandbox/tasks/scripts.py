"""Small Python programs run inside a sandbox with ``python3 -c`` (standard library, plus python3-xlib where the
image has a display, python3-websockets where it has Chromium). Each prints one JSON document; a failure exits
non-zero with the reason on stderr."""

from __future__ import annotations

import json
from typing import Any

from sandbox.models import ExecResult
from sandbox.tasks.errors import TaskError

CDP_PORTS = (9222, 1337)
"""Where Chromium's DevTools answer: 9222 in the browser sandbox; OSWorld starts Chrome on 1337."""

BLANK_PAGES = frozenset({"", "about:blank", "chrome://newtab/", "chrome://new-tab-page/",
                         "chrome://new-tab-page-third-party/"})  # fmt: skip
"""A new tab's first document, and the start page Chromium opens (the third-party one when its search engine is not
Google's, as in the desktop image)."""

READY_JS = (
    "new Promise(done => { const ready = () => done(location.href);"
    " document.readyState === 'complete' ? ready() : addEventListener('load', ready); })"
)
"""The page's URL once its document has loaded."""

CDP = (
    r"""
import asyncio, json, sys, time, urllib.parse, urllib.request
def call(port, path, method="GET"):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode("utf-8", "replace")
def answering():
    for p in PORTS:
        try:
            call(p, "/json/version")
            return p
        except Exception:
            pass
    return None
def on_page(port, target, seconds, talk, late):
    # talk(ask) over the page's DevTools websocket, ask(expression) being Runtime.evaluate's reply (promises awaited,
    # the value returned as JSON); exits with `late` when talk has not returned within `seconds`.
    import websockets
    async def run():
        url = "ws://127.0.0.1:%d/devtools/page/%s" % (port, target)
        async with websockets.connect(url, max_size=None, ping_interval=None) as ws:
            ids = iter(range(1, 1 << 30))
            async def ask(expression):
                n = next(ids)
                params = {"expression": expression, "awaitPromise": True, "returnByValue": True}
                await ws.send(json.dumps({"id": n, "method": "Runtime.evaluate", "params": params}))
                reply = {}
                while reply.get("id") != n:
                    reply = json.loads(await ws.recv())
                return reply
            return await talk(ask)
    try:
        return asyncio.run(asyncio.wait_for(run(), seconds))
    except asyncio.TimeoutError:
        sys.exit(late)
    except Exception as e:
        sys.exit("cannot reach the page over DevTools: %r" % (e,))
def loaded(port, target, seconds):
    # Chromium's HTTP endpoints say nothing of a page's load: ask the page over its websocket until its document,
    # no longer the new tab's blank one, has loaded (an evaluation the navigation cut short is asked again).
    async def until_loaded(ask):
        while True:
            reply = await ask(READY_JS)
            href = ((reply.get("result") or {}).get("result") or {}).get("value")
            if isinstance(href, str) and href not in BLANK_PAGES:
                return href
            await asyncio.sleep(0.05)
    return on_page(port, target, seconds, until_loaded, "still loading after %g s" % seconds)
def evaluate(port, expression, seconds):
    # In the most recently active page (the first /json/list names); its JSON value, as the browser agent's.
    pages = [t for t in json.loads(call(port, "/json/list")) if t.get("type") == "page"]
    if not pages:
        sys.exit("the browser has no page open")
    async def once(ask):
        return await ask(expression)
    reply = on_page(port, pages[0]["id"], seconds, once, "no value after %g s" % seconds)
    if "error" in reply:
        sys.exit("cannot evaluate the expression: %s" % (reply["error"].get("message") or reply["error"],))
    result = reply.get("result") or {}
    details = result.get("exceptionDetails")
    if details is not None:  # an Error's description is its message, then its stack: the message alone, one line
        thrown = details.get("exception") or {}
        text = str(thrown.get("description") or thrown.get("value") or details.get("text") or "unknown error")
        sys.exit("JavaScript error: " + (text.splitlines() or ["?"])[0])
    remote = result.get("result") or {}
    # NaN, Infinity, -0 and bigints have no JSON form; Chromium sends them as strings.
    return remote.get("value", remote.get("unserializableValue"))
op, args = sys.argv[1], sys.argv[2:]
port = answering()
if op == "ready":  # a Chromium an earlier step started: wait up to args[0] seconds for its DevTools to answer
    give_up = time.monotonic() + float(args[0])
    while port is None and time.monotonic() < give_up:
        time.sleep(0.1)
        port = answering()
if port is None:
    sys.exit("no Chromium DevTools endpoint answers on 127.0.0.1 ports %s" % (PORTS,))
if op == "ready":
    out = port
elif op == "list":
    out = [{"id": t["id"], "url": t.get("url", ""), "title": t.get("title", "")}
           for t in json.loads(call(port, "/json/list")) if t.get("type") == "page"]
elif op == "new":
    out = [json.loads(call(port, "/json/new?" + urllib.parse.quote(u, safe=""), "PUT"))["id"] for u in args]
elif op == "close":
    out = [call(port, "/json/close/" + i) for i in args]
elif op == "loaded":  # args: a page's target id, seconds
    out = loaded(port, args[0], float(args[1]))
elif op == "evaluate":  # args: a JavaScript expression, seconds
    out = evaluate(port, args[0], float(args[1]))
else:
    sys.exit("unknown op " + op)
print(json.dumps(out))
""".replace("PORTS", repr(CDP_PORTS))
    .replace("BLANK_PAGES", repr(sorted(BLANK_PAGES)))
    .replace("READY_JS", repr(READY_JS))
)

OPEN = r"""
import json, mimetypes, os, re, shlex, subprocess, sys
path = sys.argv[1]
if not os.path.exists(path):
    sys.exit("no such file or folder: " + path)
if os.path.isdir(path):
    mime = "inode/directory"
else:
    mime = mimetypes.guess_type(path)[0] or "text/plain"
def default(m):
    try:
        return subprocess.run(["xdg-mime", "query", "default", m], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""
entry = default(mime)
if not entry and (mime.startswith("text/") or re.search(r"json|xml|javascript|x-sh|yaml|toml", mime)):
    entry = default("text/plain")
if not entry:
    sys.exit("no application opens %s (%s)" % (path, mime))
data_dirs = os.environ.get("XDG_DATA_DIRS", "/usr/local/share:/usr/share").split(":")
dirs = [os.path.expanduser("~/.local/share")] + data_dirs
for d in dirs:
    f = os.path.join(d, "applications", entry)
    if os.path.isfile(f):
        break
else:
    sys.exit("the desktop entry %s for %s is missing" % (entry, mime))
line = next((l[5:].strip() for l in open(f, encoding="utf-8") if l.startswith("Exec=")), "")
argv, placed = [], False
for a in shlex.split(line):
    if a in ("%f", "%F", "%u", "%U"):
        argv.append(path)
        placed = True
    elif not re.fullmatch(r"%[a-zA-Z]", a):
        argv.append(a.replace("%%", "%"))
if not placed:
    argv.append(path)
subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 start_new_session=True)
print(json.dumps({"mime": mime, "entry": entry, "argv": argv}))
"""

CLOSE_WINDOWS = r"""
import json, sys
from Xlib import X, display, error, protocol
d = display.Display()
delete, protocols = d.intern_atom("WM_DELETE_WINDOW"), d.intern_atom("WM_PROTOCOLS")
done = []
for wid in (int(w) for w in sys.argv[1:]):
    win = d.create_resource_object("window", wid)
    try:
        if delete in (win.get_wm_protocols() or []):
            data = (32, [delete, X.CurrentTime, 0, 0, 0])
            win.send_event(protocol.event.ClientMessage(window=win, client_type=protocols, data=data))
            done.append([wid, "delete"])
        else:
            win.kill_client()
            done.append([wid, "kill"])
    except error.XError as e:
        done.append([wid, "gone"])
d.sync()
print(json.dumps(done))
"""

CLIPBOARD = r"""
import json, sys, time
from Xlib import X, display
d = display.Display()
selection = d.intern_atom(sys.argv[1] if len(sys.argv) > 1 else "CLIPBOARD")
if not d.get_selection_owner(selection):
    print(json.dumps(None))
    sys.exit(0)
win = d.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
prop = d.intern_atom("SANDBOX_TASKS_SELECTION")
win.convert_selection(selection, d.intern_atom("UTF8_STRING"), prop, X.CurrentTime)
d.flush()
text, give_up = None, time.time() + 5
while time.time() < give_up:
    if not d.pending_events():
        time.sleep(0.01)
        continue
    event = d.next_event()
    if event.type == X.SelectionNotify:
        if event.property != X.NONE:
            value = win.get_full_property(prop, X.AnyPropertyType).value
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        break
print(json.dumps(text))
"""

LIST_DIRECTORY = r"""
import json, os, sys
def tree(path):
    node = {"type": "directory", "name": os.path.basename(path.rstrip("/")) or path, "children": []}
    for entry in sorted(os.listdir(path)):
        full = os.path.join(path, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            node["children"].append(tree(full))
        else:
            node["children"].append({"type": "file", "name": entry})
    return node
path = sys.argv[1]
print(json.dumps(tree(path) if os.path.isdir(path) else None))
"""


def argv(script: str, *args: str) -> list[str]:
    return ["python3", "-c", script, *args]


def output(result: ExecResult, what: str) -> Any:
    """The JSON a script printed; :class:`TaskError` with its reason when it failed."""
    if not result.ok:
        reason = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
        raise TaskError(f"{what}: {reason}" + (" (timed out)" if result.timed_out else ""))
    try:
        return json.loads(result.stdout)
    except ValueError as e:
        raise TaskError(f"{what}: unexpected output {result.stdout[:200]!r}: {e}") from None
