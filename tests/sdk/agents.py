"""The gateway as coding agents call it, through the official `openai` and `anthropic` SDKs.

Run by tests/sdk/agents.sh (which starts the daemon, the profiles and the API key):

    SDK_BASE=http://127.0.0.1:PORT SDK_KEY=… SDK_ADMIN_TOKEN=… SDK_CALLS=40 \
        python agents.py agent=started agent-od=on-demand

For each model, SDK_CALLS calls back to back, one at a time, as an agent makes them: OpenAI chat
completions and Anthropic messages, streamed and not. The kinds follow a de Bruijn sequence, so
every kind of call comes right after every other kind (after a streamed reply too: llama-server
closes its connection then, and the gateway's next request must not go out on it). Before every
PAUSE_EVERY-th call the script waits a while, past the 2 s idle timeout of the on-demand profile
or around it, and notes the model's state in the gateway first (an idle stop, then a load on
demand by the call). The clients never retry (max_retries=0): every call must succeed by itself,
streamed ones with text deltas (and OpenAI's usage chunk, Anthropic's message_start), whole ones
with their usage. Decoding samples as the engine does unless SDK_GREEDY=1 (see SAMPLING below). Exits 1 on any
failure, after a summary: calls by kind, failures with their messages, the slowest call, what the
pauses met.
"""

import json
import os
import sys
import time
import traceback
import urllib.request
from collections import Counter, defaultdict

import anthropic
import openai

BASE = os.environ["SDK_BASE"].rstrip("/")
KEY = os.environ["SDK_KEY"]
ADMIN = os.environ["SDK_ADMIN_TOKEN"]
CALLS = int(os.environ.get("SDK_CALLS", "40"))
MAX_TOKENS = 8
# A load on demand on two busy cores takes seconds; a hung call fails here rather than hanging.
TIMEOUT_S = 180.0
PAUSE_EVERY = 6
# Around and past the idle timeout (2 s, checked every second): some pauses meet the model still
# ready or stopping, the longer ones stopped.
PAUSES_S = [3.5, 2.2, 4.5, 2.8, 3.2, 2.5]

# The engine's own sampling, as agents call it. With it, about 1 in 40 of llama-server's streamed
# Anthropic messages (llama.cpp 0c1e570) comes without its `message_start` event (when the first
# token sampled is an incomplete UTF-8 sequence), on which the anthropic SDK's stream helper
# fails; the gateway writes the event in then, and the checks below hold it to that.
# SDK_GREEDY=1 decodes greedily instead (the same answers on every run).
# The anthropic SDK (2.x) has no `temperature` parameter any more; it goes in the body as it is.
GREEDY = os.environ.get("SDK_GREEDY") == "1"
SAMPLING = {"temperature": 0} if GREEDY else {}
A_SAMPLING = {"extra_body": {"temperature": 0}} if GREEDY else {}

KINDS = ["openai", "openai-stream", "anthropic", "anthropic-stream"]
# B(4, 2): read cyclically, each of the 16 ordered pairs of kinds appears once.
DE_BRUIJN = [0, 0, 1, 1, 0, 2, 1, 2, 2, 0, 3, 1, 3, 2, 3, 3]

oa = openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT_S)
an = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=TIMEOUT_S)

SYSTEM = "You are a coding agent. Answer in one short line."


def prompt(i):
    return f"Step {i}: name one file to open next."


def call_openai(model, i):
    r = oa.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt(i)}],
        max_tokens=MAX_TOKENS,
        **SAMPLING,
    )
    if not r.choices or r.choices[0].message is None:
        raise AssertionError(f"no choice in the answer: {r.model_dump_json()[:300]}")
    if r.usage is None or not r.usage.completion_tokens:
        raise AssertionError(f"no usage (completion_tokens) in the answer: {r.model_dump_json()[:300]}")
    return r.usage.completion_tokens


def call_openai_stream(model, i):
    stream = oa.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt(i)}],
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
        **SAMPLING,
    )
    deltas = 0
    usage = None
    with stream:
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta is not None and choice.delta.content:
                    deltas += 1
    if deltas == 0:
        raise AssertionError("the stream carried no text delta")
    if usage is None or not usage.completion_tokens:
        raise AssertionError("the stream ended without usage (stream_options.include_usage)")
    return usage.completion_tokens


def call_anthropic(model, i):
    m = an.messages.create(
        model=model,
        system=SYSTEM,
        messages=[{"role": "user", "content": prompt(i)}],
        max_tokens=MAX_TOKENS,
        **A_SAMPLING,
    )
    if m.usage is None or not m.usage.output_tokens:
        raise AssertionError(f"no usage (output_tokens) in the message: {m.model_dump_json()[:300]}")
    if not any(block.type == "text" for block in m.content):
        raise AssertionError(f"no text block in the message: {m.model_dump_json()[:300]}")
    return m.usage.output_tokens


def call_anthropic_stream(model, i):
    deltas = 0
    kinds = []
    with an.messages.stream(
        model=model,
        system=SYSTEM,
        messages=[{"role": "user", "content": prompt(i)}],
        max_tokens=MAX_TOKENS,
        **A_SAMPLING,
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            delta = getattr(event, "delta", None)
            if event.type == "content_block_delta" and delta.type == "text_delta" and delta.text:
                deltas += 1
        if "message_start" not in kinds:
            # The SDK's get_final_message() would fail on a bare assert: say what came instead.
            seen = ", ".join(dict.fromkeys(kinds))
            raise AssertionError(f"the stream had no message_start event; it had: {seen}")
        final = stream.get_final_message()
    if deltas == 0:
        raise AssertionError("the stream carried no text delta")
    if final.usage is None or not final.usage.output_tokens:
        raise AssertionError("the stream's final message has no usage (output_tokens)")
    return final.usage.output_tokens


CALL = {
    "openai": call_openai,
    "openai-stream": call_openai_stream,
    "anthropic": call_anthropic,
    "anthropic-stream": call_anthropic_stream,
}


def admin(path):
    req = urllib.request.Request(f"{BASE}{path}", headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def gateway_state(model):
    try:
        for m in admin("/api/v1/gateway")["models"]:
            if m["name"] == model:
                return m["state"]
        return "absent"
    except Exception as e:  # the state is only noted; the calls decide the verdict
        return f"unknown ({e})"


def describe(e):
    text = f"{type(e).__name__}: {e}"
    if not str(e):
        # A bare `assert` (in an SDK, say): where it was raised is the message.
        frame = traceback.extract_tb(e.__traceback__)[-1]
        text += f"(raised at {frame.filename}:{frame.lineno}: {frame.line})"
    status = getattr(e, "status_code", None)
    if status is not None and f"{status}" not in text:
        text = f"{type(e).__name__} {status}: {e}"
    cause = e.__cause__ or e.__context__
    if cause is not None and isinstance(e, (openai.APIConnectionError, anthropic.APIConnectionError)):
        text += f" (cause: {type(cause).__name__}: {cause})"
    return text


def run(model):
    records = []
    pauses = []
    previous = None
    for i in range(CALLS):
        kind = KINDS[DE_BRUIJN[i % len(DE_BRUIJN)]]
        paused = None
        if i > 0 and i % PAUSE_EVERY == 0:
            paused = PAUSES_S[(i // PAUSE_EVERY - 1) % len(PAUSES_S)]
            time.sleep(paused)
            pauses.append((i, paused, gateway_state(model)))
        started = time.monotonic()
        error = None
        tokens = 0
        try:
            tokens = CALL[kind](model, i)
        except Exception as e:
            error = describe(e)
        seconds = time.monotonic() - started
        records.append(
            {"model": model, "i": i, "kind": kind, "after": previous, "paused": paused,
             "seconds": seconds, "tokens": tokens, "error": error}
        )
        if error:
            pause = f", {paused} s pause" if paused else ""
            print(f"  FAIL {model} #{i} {kind} (after {previous or 'nothing'}{pause}, "
                  f"{seconds:.2f} s): {error}", flush=True)
        previous = kind
    return records, pauses


def main(models):
    all_records = []
    all_pauses = {}
    for model, _ in models:
        started = time.monotonic()
        records, pauses = run(model)
        all_records += records
        all_pauses[model] = pauses
        bad = sum(1 for r in records if r["error"])
        print(f"sdk agents: {model}: {len(records)} calls in {time.monotonic() - started:.1f} s, "
              f"{bad} failed", flush=True)

    evictions = admin("/api/v1/gateway").get("evictions", [])
    idle_stops = Counter(e["evicted"] for e in evictions if not e.get("for_model"))

    print("sdk agents: summary")
    by_kind = defaultdict(list)
    for r in all_records:
        by_kind[(r["model"], r["kind"])].append(r)
    for (model, kind), rs in sorted(by_kind.items()):
        ok = [r for r in rs if not r["error"]]
        after_stream = sum(1 for r in rs if r["after"] and r["after"].endswith("-stream"))
        secs = sorted(r["seconds"] for r in rs)
        print(f"  {model:10} {kind:17} {len(ok):3}/{len(rs):<3} ok, {after_stream:2} right after a "
              f"streamed reply, median {secs[len(secs) // 2]:.2f} s, max {secs[-1]:.2f} s")
    for model, pauses in all_pauses.items():
        met = Counter(state for _, _, state in pauses)
        states = ", ".join(f"{state} {n}" for state, n in met.most_common())
        # The gateway keeps its latest 20 stops: more than that reads as "20+".
        stops = idle_stops.get(model, 0)
        print(f"  {model}: {len(pauses)} pauses of {min(PAUSES_S)}–{max(PAUSES_S)} s, the next call met the model "
              f"{states or '-'}; idle stops by the gateway: {stops}{'+' if len(evictions) >= 20 else ''}")
    slowest = max(all_records, key=lambda r: r["seconds"])
    pause = f" (after a {slowest['paused']} s pause)" if slowest["paused"] else ""
    print(f"  slowest call: {slowest['model']} #{slowest['i']} {slowest['kind']} "
          f"{slowest['seconds']:.2f} s{pause}")
    failures = [r for r in all_records if r["error"]]
    print(f"  {len(all_records)} calls, {len(failures)} failed")
    for r in failures:
        pause = f" and a {r['paused']} s pause" if r["paused"] else ""
        print(f"    {r['model']} #{r['i']} {r['kind']} after {r['after'] or 'nothing'}{pause}: "
              f"{r['error']}")

    problems = []
    if failures:
        problems.append(f"{len(failures)} of {len(all_records)} calls failed")
    # The test means to meet idle stops and loads on demand: say so when it did not.
    for model, role in models:
        stopped = idle_stops.get(model, 0)
        if role == "on-demand" and stopped == 0:
            problems.append(f"{model} was never stopped for idleness: the pauses did not exercise "
                            "loads on demand")
        if role == "started" and stopped:
            problems.append(f"{model} (started, no idle timeout) was stopped {stopped} time(s)")
    if problems:
        print("sdk agents: FAILED: " + "; ".join(problems))
        return 1
    print("sdk agents: passed")
    return 0


if __name__ == "__main__":
    # MODEL=started (a profile the test started, no idle timeout) or MODEL=on-demand (loaded by
    # the gateway, stopped after its idle timeout).
    sys.exit(main([tuple(arg.split("=", 1)) for arg in sys.argv[1:]]))
