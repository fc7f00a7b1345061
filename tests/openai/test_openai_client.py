#!/usr/bin/env python3
"""`kestrel serve` through the official `openai` Python package.

Run against a server that is already up (crates/kestrel-cli/tests/openai_client.rs
starts one and runs this script):

    python3 tests/openai/test_openai_client.py --base-url http://127.0.0.1:8080/v1 --api-key KEY

Every endpoint the package has a method for (models, chat completions,
completions, responses), streamed and not, and Anthropic's Messages API
through the official `anthropic` package (llama-server answers it too), with every request field the server reads,
plus the error classes the package maps status codes to. Where the package
cannot see something (the `[DONE]` line, headers, llama-server's extra
endpoints) the check uses raw HTTP. Answers are compared with each other
(streamed vs not, one spelling of a field vs another) rather than pinned; the
prompts are picked for SmolLM2-135M-Instruct (its greedy answer to "Hi" ends
with EOS within 16 tokens, " yes" is one token), and every request generates
at most 16 tokens so that the script runs in well under a minute on a CPU.
Prints one line per check and exits 1 if any failed.
"""

import argparse
import json
import sys
import traceback
import urllib.error
import urllib.request

try:
    import anthropic
    import openai
except ImportError as e:
    req = __file__.rsplit("/", 1)[0] + "/requirements.txt"
    sys.exit(f"{e.name} is missing: python3 -m pip install -r {req}")

# Tokens per answer unless a check needs another number.
N = 12


class Ctx:
    def __init__(self, base_url, api_key):
        self.base_url = base_url.rstrip("/")
        self.root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        self.api_key = api_key
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, timeout=120)
        # Anthropic's package sends the key as x-api-key, to {root}/v1/messages.
        self.anthropic = anthropic.Anthropic(base_url=self.root, api_key=api_key, max_retries=0, timeout=120)
        self.model = None
        self.n_ctx = None

    # Raw HTTP, for what the package does not show.
    def http(self, method, path, body=None, key=True):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.root + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def http_json(self, method, path, body=None):
        status, _, raw = self.http(method, path, body)
        assert status == 200, f"{method} {path}: HTTP {status}: {raw[:300]!r}"
        return json.loads(raw)

    def tokenize(self, text, add_special=False):
        return self.http_json("POST", "/tokenize", {"content": text, "add_special": add_special})["tokens"]

    def detokenize(self, ids):
        return self.http_json("POST", "/detokenize", {"tokens": ids})["content"]

    def chat(self, messages, **kw):
        kw.setdefault("model", self.model)
        kw.setdefault("max_tokens", N)
        kw.setdefault("temperature", 0)
        return self.client.chat.completions.create(messages=messages, **kw)

    def chat_stream(self, messages, *, include_usage=False, **kw):
        if include_usage:
            kw["stream_options"] = {"include_usage": True}
        return read_stream(self.chat(messages, stream=True, **kw), chat=True, include_usage=include_usage)

    def complete_stream(self, prompt, *, include_usage=False, **kw):
        if include_usage:
            kw["stream_options"] = {"include_usage": True}
        return read_stream(self.complete(prompt, stream=True, **kw), chat=False, include_usage=include_usage)

    def complete(self, prompt, **kw):
        kw.setdefault("model", self.model)
        kw.setdefault("max_tokens", N)
        kw.setdefault("temperature", 0)
        return self.client.completions.create(prompt=prompt, **kw)


def user(text):
    return [{"role": "user", "content": text}]


# Prompts whose greedy answers SmolLM2 ends with EOS (HI) or runs past N
# tokens (LONG); both are checked where relied on.
HI = user("Hi")
LONG = user("Say hello.")
REPEAT = "the the the the the the the the"


CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def eq(got, want, what):
    assert got == want, f"{what}: got {got!r}, want {want!r}"


def extra(obj, name):
    """A field the package's model does not declare (llama-server's extras)."""
    ex = obj.model_extra or {}
    assert name in ex, f"{type(obj).__name__} has no {name!r} (extra fields: {sorted(ex)})"
    return ex[name]


def check_usage(u, *, finish=None, max_tokens=None):
    assert u is not None, "usage is missing"
    assert u.prompt_tokens > 0, f"usage.prompt_tokens = {u.prompt_tokens}"
    assert u.completion_tokens >= 0
    eq(u.total_tokens, u.prompt_tokens + u.completion_tokens, "usage.total_tokens")
    if max_tokens is not None:
        assert u.completion_tokens <= max_tokens, f"{u.completion_tokens} tokens > max_tokens {max_tokens}"
        if finish == "length":
            eq(u.completion_tokens, max_tokens, "completion_tokens when finish_reason is 'length'")
        if finish == "stop":
            # The end token counts (as llama-server counts it), so an answer
            # whose last allowed token was the end has max_tokens.
            assert u.completion_tokens <= max_tokens, f"finish 'stop' with {u.completion_tokens} tokens"


def counts(u):
    """A usage's token counts; the cached part of the prompt depends on what
    ran before, so it is left out."""
    return (u.prompt_tokens, u.completion_tokens, u.total_tokens)


def check_timings(t, u):
    assert isinstance(t, dict), f"timings is {t!r}"
    for k in ["prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_second"]:
        assert k in t, f"timings lacks {k!r}: {t}"
    # llama-server's prompt_n counts the prompt tokens evaluated, cache_n
    # those reused from the slot's cache; usage counts the whole prompt.
    cache_n = t.get("cache_n", 0)
    assert 0 <= cache_n < u.prompt_tokens, f"timings.cache_n {cache_n} of {u.prompt_tokens} prompt tokens"
    eq(t["prompt_n"] + cache_n, u.prompt_tokens, "timings.prompt_n + timings.cache_n vs usage.prompt_tokens")
    eq(t["predicted_n"], u.completion_tokens, "timings.predicted_n vs usage.completion_tokens")


def check_chat(r, ctx, *, max_tokens=N):
    assert r.id.startswith("chatcmpl-"), f"id {r.id!r}"
    eq(r.object, "chat.completion", "object")
    assert isinstance(r.created, int) and r.created > 1_600_000_000, f"created {r.created!r}"
    eq(r.model, ctx.model, "model")
    assert r.system_fingerprint, "system_fingerprint is empty"
    eq(len(r.choices), 1, "number of choices")
    c = r.choices[0]
    eq(c.index, 0, "choice index")
    eq(c.message.role, "assistant", "message.role")
    assert isinstance(c.message.content, str), f"content {c.message.content!r}"
    assert c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason!r}"
    check_usage(r.usage, finish=c.finish_reason, max_tokens=max_tokens)
    check_timings(extra(r, "timings"), r.usage)
    return c.message.content


def check_completion(r, ctx, *, max_tokens=N):
    assert r.id.startswith("cmpl-"), f"id {r.id!r}"
    eq(r.object, "text_completion", "object")
    eq(r.model, ctx.model, "model")
    eq(len(r.choices), 1, "number of choices")
    c = r.choices[0]
    eq(c.index, 0, "choice index")
    assert isinstance(c.text, str), f"text {c.text!r}"
    assert c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason!r}"
    check_usage(r.usage, finish=c.finish_reason, max_tokens=max_tokens)
    check_timings(extra(r, "timings"), r.usage)
    return c.text


class Streamed:
    def __init__(self, text, finish, usage, chunks, logprobs):
        self.text, self.finish, self.usage, self.chunks, self.logprobs = text, finish, usage, chunks, logprobs


def read_stream(stream, *, chat, include_usage):
    """Consumes a stream, asserting the invariants every stream must keep."""
    chunks = list(stream)
    assert chunks, "the stream is empty"
    first = chunks[0]
    object_ = "chat.completion.chunk" if chat else "text_completion"
    prefix = "chatcmpl-" if chat else "cmpl-"
    assert first.id.startswith(prefix), f"id {first.id!r}"
    for i, ch in enumerate(chunks):
        eq(ch.id, first.id, f"chunk {i} id (every chunk carries the same id)")
        eq(ch.object, object_, f"chunk {i} object")
        eq(ch.created, first.created, f"chunk {i} created")
        eq(ch.model, first.model, f"chunk {i} model")
    with_choices = [ch for ch in chunks if ch.choices]
    assert with_choices, "no chunk has a choice"
    for i, ch in enumerate(with_choices):
        eq(len(ch.choices), 1, f"choice chunk {i}: number of choices")
        c = ch.choices[0]
        eq(c.index, 0, f"choice chunk {i}: index")
        last = i == len(with_choices) - 1
        if last:
            assert c.finish_reason in ("stop", "length"), f"last choice chunk: finish_reason {c.finish_reason!r}"
        else:
            assert c.finish_reason is None, (
                f"choice chunk {i} of {len(with_choices)} has finish_reason {c.finish_reason!r}; only the last may"
            )
        if chat:
            if i == 0:
                eq(c.delta.role, "assistant", "the first delta's role")
            else:
                assert c.delta.role is None, f"choice chunk {i} repeats role {c.delta.role!r}"
    # The choice chunks come first, then at most the usage chunk.
    n = len(with_choices)
    eq([bool(ch.choices) for ch in chunks[:n]], [True] * n, "choice chunks precede any chunk without choices")
    rest = chunks[n:]
    if include_usage:
        eq(len(rest), 1, "chunks after the finish_reason chunk with include_usage")
        eq(rest[0].choices, [], "the usage chunk's choices")
        assert rest[0].usage is not None, "the final chunk carries no usage"
        for i, ch in enumerate(chunks[:-1]):
            assert ch.usage is None, f"chunk {i} carries usage before the final chunk"
        usage = rest[0].usage
    else:
        eq(len(rest), 0, "chunks without choices when usage was not asked for")
        for i, ch in enumerate(chunks):
            assert ch.usage is None, f"chunk {i} carries usage that was not asked for"
        usage = None
    last = with_choices[-1]
    if chat:
        text = "".join(ch.choices[0].delta.content or "" for ch in with_choices)
        lps = [e for ch in with_choices if ch.choices[0].logprobs for e in (ch.choices[0].logprobs.content or [])]
    else:
        text = "".join(ch.choices[0].text for ch in with_choices)
        lps = [ch.choices[0].logprobs for ch in with_choices if ch.choices[0].logprobs]
    timings = extra(last, "timings")
    if usage is not None:
        check_timings(timings, usage)
    return Streamed(text, last.choices[0].finish_reason, usage, chunks, lps)


def bad_request(fn, *words, type_="invalid_request_error"):
    """Runs fn, which must fail with openai.BadRequestError naming `words`."""
    try:
        fn()
    except openai.BadRequestError as e:
        eq(e.status_code, 400, "status")
        eq(e.type, type_, "error type")
        msg = str(e.message)
        for w in words:
            assert w in msg, f"the 400's message {msg!r} does not mention {w!r}"
        return msg
    raise AssertionError("no BadRequestError (the request succeeded)")


# --- models -----------------------------------------------------------------


@check
def models_list(ctx):
    page = ctx.client.models.list()
    eq(len(page.data), 1, "number of models")
    m = page.data[0]
    assert isinstance(m.id, str) and m.id, f"model id {m.id!r}"
    eq(m.object, "model", "object")
    assert m.owned_by, "owned_by is empty"
    assert isinstance(m.created, int)
    ctx.model = m.id
    got = ctx.client.models.retrieve(m.id)
    eq((got.id, got.object), (m.id, "model"), "models.retrieve")
    try:
        ctx.client.models.retrieve("no-such-model")
        raise AssertionError("models.retrieve of an unknown name succeeded")
    except openai.NotFoundError as e:
        assert "no-such-model" in str(e), f"404 message: {e}"
    # llama-server answers /v1/models without a key.
    wrong = openai.OpenAI(base_url=ctx.base_url, api_key="not-the-key", max_retries=0)
    eq([x.id for x in wrong.models.list().data], [m.id], "models.list with a wrong key (a public endpoint)")
    n_ctx = ctx.http_json("GET", "/props")["default_generation_settings"]["n_ctx"]
    assert isinstance(n_ctx, int) and n_ctx > 2 * N, f"/props n_ctx {n_ctx!r}"
    ctx.n_ctx = n_ctx


# --- chat completions -------------------------------------------------------


@check
def chat_basic_fields_and_timings(ctx):
    r = ctx.chat(LONG)
    text = check_chat(r, ctx)
    assert text, "empty answer"
    assert r.choices[0].logprobs is None, "logprobs without asking"
    raw = ctx.client.chat.completions.with_raw_response.create(
        model=ctx.model, messages=LONG, max_tokens=N, temperature=0
    )
    assert raw.headers["content-type"].startswith("application/json"), raw.headers["content-type"]
    body = json.loads(raw.text)
    assert isinstance(body.get("timings"), dict), f"raw JSON has no timings object: {sorted(body)}"
    eq(body["choices"][0]["message"]["content"], text, "greedy answer, asked twice")
    eq(raw.parse().choices[0].message.content, text, "with_raw_response.parse()")


@check
def chat_content_as_text_parts(ctx):
    # Parts join with a newline, as llama-server joins them.
    plain = ctx.chat(user("Say\nhello."))
    parts = [{"type": "text", "text": "Say"}, {"type": "text", "text": "hello."}]
    parts = ctx.chat([{"role": "user", "content": parts}])
    check_chat(parts, ctx)
    eq(parts.usage.prompt_tokens, plain.usage.prompt_tokens, "prompt_tokens, parts vs string")
    eq(parts.choices[0].message.content, plain.choices[0].message.content, "answer, parts vs string")


@check
def chat_system_developer_and_assistant_roles(ctx):
    conv = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Say hello."},
    ]
    a = ctx.chat(conv)
    check_chat(a, ctx)
    b = ctx.chat([{**conv[0], "role": "developer"}] + conv[1:])
    eq(b.choices[0].message.content, a.choices[0].message.content, "answer with 'developer' vs 'system'")
    eq(b.usage.prompt_tokens, a.usage.prompt_tokens, "prompt_tokens with 'developer' vs 'system'")
    assert a.usage.prompt_tokens > ctx.chat(LONG).usage.prompt_tokens, "the earlier turns are not in the prompt"


@check
def chat_max_tokens_and_finish_length(ctx):
    nog = openai.NOT_GIVEN
    for kw, n in [({"max_tokens": 5}, 5), ({"max_tokens": nog, "max_completion_tokens": 7}, 7),
                  ({"max_tokens": nog, "extra_body": {"n_predict": 6, "ignore_eos": True}}, 6)]:
        kw.setdefault("extra_body", {"ignore_eos": True})
        r = ctx.chat(LONG, **kw)
        check_chat(r, ctx, max_tokens=n)
        what = ", ".join(f"{k}={v}" for k, v in kw.items() if v is not nog)
        eq(r.choices[0].finish_reason, "length", f"finish_reason with {what}")
        eq(r.usage.completion_tokens, n, f"completion_tokens with {what}")


@check
def chat_eos_stop_and_ignore_eos(ctx):
    r = ctx.chat(HI, max_tokens=16)
    check_chat(r, ctx, max_tokens=16)
    eq(r.choices[0].finish_reason, "stop", "finish_reason of an answer that ends with EOS (the model's answer to 'Hi')")
    short = r.choices[0].message.content
    r = ctx.chat(HI, max_tokens=16, extra_body={"ignore_eos": True})
    check_chat(r, ctx, max_tokens=16)
    eq(r.choices[0].finish_reason, "length", "finish_reason with ignore_eos")
    eq(r.usage.completion_tokens, 16, "completion_tokens with ignore_eos")
    long = r.choices[0].message.content
    assert long.startswith(short) and len(long) > len(short), f"ignore_eos answer {long!r} does not continue {short!r}"


@check
def chat_stop_strings(ctx):
    full = ctx.chat(LONG).choices[0].message.content
    words = [w for w in full.split() if full.index(w) > 0 and w.isalpha()]
    assert words, f"no word to stop at in {full!r}"
    word = words[0]
    cut = full[: full.index(word)]
    for stop in [[word], word, ["@@never@@", word]]:
        r = ctx.chat(LONG, stop=stop)
        check_chat(r, ctx)
        eq(r.choices[0].finish_reason, "stop", f"finish_reason with stop={stop!r}")
        eq(r.choices[0].message.content, cut, f"answer with stop={stop!r}")


@check
def chat_seed_reproduces_sampling(ctx):
    a = ctx.chat(LONG, temperature=1.0, seed=42).choices[0].message.content
    b = ctx.chat(LONG, temperature=1.0, seed=42).choices[0].message.content
    eq(b, a, "same seed, same answer")
    others = {ctx.chat(LONG, temperature=1.0, seed=s).choices[0].message.content for s in (1, 2, 3)}
    assert len(others | {a}) > 1, f"four seeds at temperature 1 gave one answer {a!r}: seed ignored?"


@check
def chat_truncating_samplers_reduce_to_greedy(ctx):
    greedy = ctx.chat(LONG).choices[0].message.content
    hot = {"temperature": 1.5, "seed": 7}
    assert ctx.chat(LONG, **hot).choices[0].message.content != greedy, "temperature 1.5 gave the greedy answer"
    for kw in [{"top_p": 0.0}, {"extra_body": {"top_k": 1}}, {"extra_body": {"min_p": 1.0}}]:
        r = ctx.chat(LONG, **hot, **kw)
        check_chat(r, ctx)
        eq(r.choices[0].message.content, greedy, f"answer with {kw} at temperature 1.5 (keeps only the top token)")


@check
def chat_penalties(ctx):
    msgs = user(REPEAT)
    greedy = ctx.chat(msgs, extra_body={"ignore_eos": True}).choices[0].message.content
    for kw in [{"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"extra_body": {"repeat_penalty": 1.5}}]:
        r = ctx.chat(msgs, **{"extra_body": {"ignore_eos": True}, **kw})
        check_chat(r, ctx)
        assert r.choices[0].message.content != greedy, f"{kw} did not change the greedy answer {greedy!r}"
    r = ctx.chat(msgs, extra_body={"ignore_eos": True, "repeat_penalty": 1.5, "repeat_last_n": 0})
    eq(r.choices[0].message.content, greedy, "answer with repeat_penalty 1.5 over repeat_last_n 0 tokens (no penalty)")
    neutral = {"frequency_penalty": 0.0, "presence_penalty": 0.0}
    r = ctx.chat(msgs, **neutral, extra_body={"ignore_eos": True, "repeat_penalty": 1.0})
    eq(r.choices[0].message.content, greedy, "answer with neutral penalties")


@check
def chat_logit_bias(ctx):
    greedy = ctx.chat(HI).choices[0].message.content
    first = ctx.tokenize(greedy)[0]
    r = ctx.chat(HI, logit_bias={str(first): -100})
    check_chat(r, ctx)
    got = r.choices[0].message.content
    piece = ctx.detokenize([first])
    assert not got.startswith(piece), f"banned first token {first} ({piece!r}) still starts the answer {got!r}"
    forced = ctx.tokenize(" yes")
    eq(len(forced), 1, "' yes' is one token")
    r = ctx.chat(HI, max_tokens=5, logit_bias={str(forced[0]): 100}, extra_body={"ignore_eos": True})
    eq(r.choices[0].message.content, " yes" * 5, "answer with logit_bias +100 on ' yes'")
    bad_request(lambda: ctx.chat(HI, logit_bias={"99999999": 1}), "logit_bias", "outside the vocabulary")


@check
def chat_logprobs(ctx):
    r = ctx.chat(LONG, logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    text = check_chat(r, ctx)
    content = r.choices[0].logprobs.content
    eq(len(content), r.usage.completion_tokens, "logprobs entries vs completion_tokens")
    for i, e in enumerate(content):
        assert e.logprob <= 0, f"token {i}: logprob {e.logprob}"
        eq(bytes(e.bytes).decode("utf-8", "replace"), e.token, f"token {i}: bytes vs token")
        eq(len(e.top_logprobs), 3, f"token {i}: number of top_logprobs")
        lps = [t.logprob for t in e.top_logprobs]
        eq(lps, sorted(lps, reverse=True), f"token {i}: top_logprobs order")
        # Greedy: the chosen token is the most likely one.
        eq(e.top_logprobs[0].token, e.token, f"token {i}: greedy choice vs top_logprobs[0]")
        top = e.top_logprobs[0].logprob
        assert abs(top - e.logprob) < 1e-4, f"token {i}: logprob {e.logprob} vs top_logprobs[0] {top}"
    eq("".join(e.token for e in content), text, "logprobs tokens joined vs the answer")
    r = ctx.chat(LONG, logprobs=True)
    for i, e in enumerate(r.choices[0].logprobs.content):
        eq(e.top_logprobs, [], f"token {i}: top_logprobs without top_logprobs")
    bad_request(lambda: ctx.chat(LONG, logprobs=True, top_logprobs=21), "top_logprobs")
    bad_request(lambda: ctx.chat(LONG, top_logprobs=2), "top_logprobs", "logprobs")


@check
def chat_n_1_cache_prompt_and_ignored_fields(ctx):
    a = ctx.chat(LONG, n=1, user="someone", response_format={"type": "text"})
    check_chat(a, ctx)
    # Without the cache the whole prompt is evaluated; asked again with it,
    # the prompt just evaluated is reused (llama-server's cache_prompt).
    b = ctx.chat(LONG, extra_body={"cache_prompt": False})
    eq(extra(b, "timings").get("cache_n", 0), 0, "timings.cache_n with cache_prompt false")
    c = ctx.chat(LONG, extra_body={"cache_prompt": True})
    assert extra(c, "timings").get("cache_n", 0) > 0, f"the same prompt again with cache_prompt: {extra(c, 'timings')}"
    for r in [b, c]:
        check_chat(r, ctx)
        eq(r.choices[0].message.content, a.choices[0].message.content, "answer with cache_prompt true/false vs default")


@check
def chat_stream_invariants(ctx):
    for include_usage in [False, True]:
        s = ctx.chat_stream(LONG, include_usage=include_usage)
        if include_usage:
            check_usage(s.usage, finish=s.finish, max_tokens=N)
    # Raw: the event stream ends with [DONE], every other event is JSON.
    status, headers, raw = ctx.http("POST", "/v1/chat/completions", {"messages": LONG, "max_tokens": 4, "stream": True})
    eq(status, 200, "raw stream status")
    ct = {k.lower(): v for k, v in headers.items()}["content-type"]
    assert ct.startswith("text/event-stream"), ct
    events = [e for e in raw.decode().split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") for e in events), f"non-data event in {events!r}"
    eq(events[-1], "data: [DONE]", "the last event")
    for e in events[:-1]:
        json.loads(e[len("data: "):])


@check
def chat_stream_equals_non_stream(ctx):
    for name, kw in [("greedy", {}), ("seeded temperature 0.9", {"temperature": 0.9, "seed": 1234, "top_p": 0.95}),
                     ("EOS-ended", {"messages": HI, "max_tokens": 16})]:
        msgs = kw.pop("messages", LONG)
        full = ctx.chat(msgs, **kw)
        text = check_chat(full, ctx, max_tokens=kw.get("max_tokens", N))
        s = ctx.chat_stream(msgs, include_usage=True, **kw)
        eq(s.text, text, f"{name}: streamed text vs non-streamed")
        eq(s.finish, full.choices[0].finish_reason, f"{name}: streamed finish_reason")
        eq(counts(s.usage), counts(full.usage), f"{name}: streamed usage")


@check
def chat_stream_logprobs(ctx):
    full = ctx.chat(LONG, logprobs=True, top_logprobs=2)
    s = ctx.chat_stream(LONG, logprobs=True, top_logprobs=2)
    want = full.choices[0].logprobs.content
    eq([e.token for e in s.logprobs], [e.token for e in want], "streamed logprobs tokens")
    for a, b in zip(s.logprobs, want):
        assert abs(a.logprob - b.logprob) < 1e-4, f"{a.token!r}: streamed logprob {a.logprob} vs {b.logprob}"
        eq([t.token for t in a.top_logprobs], [t.token for t in b.top_logprobs], "streamed top_logprobs")


@check
def chat_stop_and_length_streamed(ctx):
    full = ctx.chat(LONG).choices[0].message.content
    word = [w for w in full.split() if full.index(w) > 0 and w.isalpha()][0]
    s = ctx.chat_stream(LONG, include_usage=True, stop=[word])
    eq(s.finish, "stop", "streamed finish_reason at a stop string")
    eq(s.text, full[: full.index(word)], "streamed text at a stop string")
    check_usage(s.usage, finish="stop", max_tokens=N)
    # A stop string over several tokens: none of its text may leak out first.
    words = full.split()
    two = " ".join(words[1:3])
    assert len(words) > 3 and two in full, f"no two words to stop at in {full!r}"
    s = ctx.chat_stream(LONG, stop=[two])
    eq((s.finish, s.text), ("stop", full[: full.index(two)]), f"streamed finish and text at stop {two!r}")
    s = ctx.chat_stream(LONG, include_usage=True, max_tokens=3, extra_body={"ignore_eos": True})
    eq(s.finish, "length", "streamed finish_reason at max_tokens")
    eq(s.usage.completion_tokens, 3, "streamed completion_tokens at max_tokens")


# --- completions ------------------------------------------------------------


@check
def completions_prompt_shapes(ctx):
    prompt = "The capital of France is"
    r = ctx.complete(prompt)
    text = check_completion(r, ctx)
    assert r.choices[0].logprobs is None, "logprobs without asking"
    eq(ctx.complete([prompt]).choices[0].text, text, "answer to [prompt] vs prompt")
    ids = ctx.tokenize(prompt, add_special=True)
    r = ctx.complete(ids)
    check_completion(r, ctx)
    eq(r.usage.prompt_tokens, len(ids), "prompt_tokens of a token-id prompt")
    eq(r.choices[0].text, text, "answer to the prompt's token ids vs the prompt")
    eq(ctx.complete([ids]).choices[0].text, text, "answer to [token ids] vs the prompt")
    # One choice per request: several prompts are refused, not half-answered.
    bad_request(lambda: ctx.complete([prompt, "Hello"]), "several prompts")
    bad_request(lambda: ctx.complete([ids, ids]), "prompt")


@check
def completions_fields(ctx):
    greedy = ctx.complete(REPEAT, extra_body={"ignore_eos": True})
    g = check_completion(greedy, ctx)
    r = ctx.complete(REPEAT, max_tokens=4, extra_body={"ignore_eos": True})
    check_completion(r, ctx, max_tokens=4)
    eq((r.choices[0].finish_reason, r.usage.completion_tokens), ("length", 4), "finish and tokens at max_tokens 4")
    assert g.startswith(r.choices[0].text), f"4-token answer {r.choices[0].text!r} is not a prefix of {g!r}"
    r = ctx.complete(REPEAT, max_tokens=openai.NOT_GIVEN, extra_body={"n_predict": 3, "ignore_eos": True})
    eq(r.usage.completion_tokens, 3, "completion_tokens with n_predict 3")
    hot = {"temperature": 1.5, "seed": 11}
    for kw in [{"top_p": 0.0}, {"extra_body": {"top_k": 1, "ignore_eos": True}}]:
        kw.setdefault("extra_body", {"ignore_eos": True})
        eq(ctx.complete(REPEAT, **hot, **kw).choices[0].text, g, f"answer with {kw} at temperature 1.5")
    a = ctx.complete(REPEAT, temperature=1.0, seed=5).choices[0].text
    eq(ctx.complete(REPEAT, temperature=1.0, seed=5).choices[0].text, a, "same seed, same answer")
    for kw in [{"frequency_penalty": 2.0}, {"presence_penalty": 2.0}]:
        assert ctx.complete(REPEAT, **kw, extra_body={"ignore_eos": True}).choices[0].text != g, f"{kw} changed nothing"
    word = [w for w in g.split() if g.index(w) > 0 and w.isalpha()][0]
    r = ctx.complete(REPEAT, stop=word, extra_body={"ignore_eos": True})
    got = (r.choices[0].finish_reason, r.choices[0].text)
    eq(got, ("stop", g[: g.index(word)]), f"finish and text with stop={word!r}")


@check
def completions_logprobs(ctx):
    r = ctx.complete(REPEAT, logprobs=2, extra_body={"ignore_eos": True})
    text = check_completion(r, ctx)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    lens = [len(lp.tokens), len(lp.token_logprobs), len(lp.top_logprobs), len(lp.text_offset)]
    eq(lens, [n] * 4, "lengths of tokens, token_logprobs, top_logprobs, text_offset")
    eq("".join(lp.tokens), text, "logprobs tokens joined vs the text")
    offset = 0
    for i, (tok, logprob, top, off) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset)):
        eq(off, offset, f"token {i}: text_offset")
        offset += len(tok)
        assert logprob <= 0, f"token {i}: logprob {logprob}"
        assert 1 <= len(top) <= 2, f"token {i}: top_logprobs {top}"
        best = max(top, key=top.get)
        eq(best, tok, f"token {i}: the greedy token vs the best of {top}")
        assert abs(top[tok] - logprob) < 1e-4, f"token {i}: logprob {logprob} vs {top[tok]} in top_logprobs"
    bad_request(lambda: ctx.complete(REPEAT, logprobs=21), "logprobs")


@check
def completions_stream(ctx):
    for name, kw in [("greedy", {}), ("seeded", {"temperature": 0.8, "seed": 99})]:
        full = ctx.complete(REPEAT, **kw)
        text = check_completion(full, ctx)
        s = ctx.complete_stream(REPEAT, include_usage=True, **kw)
        eq(s.text, text, f"{name}: streamed text vs non-streamed")
        eq(s.finish, full.choices[0].finish_reason, f"{name}: streamed finish_reason")
        eq(counts(s.usage), counts(full.usage), f"{name}: streamed usage")
    s = ctx.complete_stream(REPEAT, logprobs=1)
    eq("".join(t for lp in s.logprobs for t in lp.tokens), s.text, "streamed logprobs tokens vs text")
    offsets = [o for lp in s.logprobs for o in lp.text_offset]
    want, at = [], 0
    for lp in s.logprobs:
        for t in lp.tokens:
            want.append(at)
            at += len(t)
    eq(offsets, want, "streamed text_offset runs on across chunks")
    status, _, raw = ctx.http("POST", "/v1/completions", {"prompt": REPEAT, "max_tokens": 3, "stream": True})
    eq(status, 200, "raw stream status")
    eq([e for e in raw.decode().split("\n\n") if e.strip()][-1], "data: [DONE]", "the last event")


# --- errors -----------------------------------------------------------------


@check
def errors_unsupported_fields_are_400(ctx):
    bad_request(lambda: ctx.chat(LONG, n=2), "'n' must be 1")
    bad_request(lambda: ctx.complete(REPEAT, n=2), "'n' must be 1")
    bad_request(lambda: ctx.chat(LONG, response_format={"type": "xml"}), "response_format")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    bad_request(lambda: ctx.chat(LONG, tools=tools, tool_choice={"type": "function", "function": {"name": "g"}}),
                "tool_choice", "g")


# --- structured output --------------------------------------------------------


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
    },
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}


@check
def structured_json_object_and_json_schema(ctx):
    import jsonschema

    r = ctx.chat(user("A cat, as a JSON object."), response_format={"type": "json_object"},
                 max_tokens=120, temperature=0.8, seed=4)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict), r.choices[0].message.content
    for seed in range(3):
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
        r = ctx.chat(user("Describe a person."), response_format=fmt, max_tokens=200, temperature=0.8, seed=seed)
        eq(r.choices[0].finish_reason, "stop", "finish_reason")
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
        streamed = ctx.chat_stream(user("Describe a person."), response_format=fmt, max_tokens=200,
                                         temperature=0.8, seed=seed)
        eq(streamed.text, r.choices[0].message.content, "streamed vs whole")


@check
def structured_sdk_parse_helper(ctx):
    # The SDK's structured-output helper: a pydantic model in, the parsed object out.
    import pydantic

    class Person(pydantic.BaseModel):
        name: str
        age: int

    parse = getattr(ctx.client.chat.completions, "parse", None) or ctx.client.beta.chat.completions.parse
    r = parse(model=ctx.model, messages=user("Describe a person."), response_format=Person,
              max_tokens=120, temperature=0.8, seed=1)
    p = r.choices[0].message.parsed
    assert isinstance(p, Person), f"parsed: {p!r}"


@check
def errors_echo_best_of_suffix_are_400(ctx):
    # Ignoring these would answer another question than the one asked.
    bad_request(lambda: ctx.complete(REPEAT, echo=True, max_tokens=0, logprobs=1), "'echo'")
    bad_request(lambda: ctx.complete(REPEAT, best_of=2), "'best_of'")
    bad_request(lambda: ctx.complete(REPEAT, suffix="}"), "'suffix'")
    r = ctx.complete(REPEAT, echo=False, best_of=1)
    check_completion(r, ctx)


@check
def errors_bad_messages_are_400(ctx):
    bad_request(lambda: ctx.chat([]), "'messages' must not be empty")
    bad_request(lambda: ctx.chat([{"role": "wizard", "content": "x"}]), "unknown role", "wizard")
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    bad_request(lambda: ctx.chat([{"role": "user", "content": image}]), "image_url")


@check
def errors_out_of_range_fields_are_400(ctx):
    bad_request(lambda: ctx.chat(LONG, temperature=-1), "'temperature'")
    bad_request(lambda: ctx.chat(LONG, top_p=1.5), "'top_p'")
    bad_request(lambda: ctx.chat(LONG, frequency_penalty=3), "'frequency_penalty'")
    bad_request(lambda: ctx.chat(LONG, max_tokens=-2), "'max_tokens'")
    bad_request(lambda: ctx.chat(LONG, extra_body={"top_k": "many"}), "'top_k'")


@check
def errors_prompt_longer_than_context_is_400(ctx):
    long_text = " hello" * (ctx.n_ctx + 8)
    # llama-server's type, which clients that shorten the conversation look for.
    overflow = "exceed_context_size_error"
    bad_request(lambda: ctx.chat(user(long_text)), "does not fit the context", type_=overflow)
    bad_request(lambda: ctx.complete(long_text), "does not fit the context", type_=overflow)


@check
def context_full_finishes_with_length(ctx):
    # A prompt that leaves the context room for fewer than max_tokens tokens.
    ids = ctx.tokenize(" hello" * (ctx.n_ctx - 4), add_special=True)[: ctx.n_ctx - 4]
    r = ctx.complete(ids, max_tokens=16, extra_body={"ignore_eos": True})
    eq(r.choices[0].finish_reason, "length", "finish_reason when the context is full")
    u = r.usage
    eq(u.prompt_tokens, ctx.n_ctx - 4, "prompt_tokens")
    assert 0 < u.completion_tokens < 16, f"completion_tokens {u.completion_tokens} with 4 free context slots"
    assert u.total_tokens <= ctx.n_ctx + 1, f"{u.total_tokens} tokens in a context of {ctx.n_ctx}"


@check
def errors_wrong_key_is_401(ctx):
    wrong = openai.OpenAI(base_url=ctx.base_url, api_key="not-the-key", max_retries=0)
    chat = wrong.chat.completions.create
    for name, call in [
        ("chat", lambda: chat(model=ctx.model, messages=LONG, max_tokens=2)),
        ("completions", lambda: wrong.completions.create(model=ctx.model, prompt="x", max_tokens=2)),
        ("stream", lambda: list(chat(model=ctx.model, messages=LONG, max_tokens=2, stream=True))),
    ]:
        try:
            call()
        except openai.AuthenticationError as e:
            eq(e.status_code, 401, f"{name}: status")
            eq(e.type, "authentication_error", f"{name}: error type")
        else:
            raise AssertionError(f"{name}: no AuthenticationError with a wrong key")


@check
def errors_unknown_route_is_404(ctx):
    for call in [lambda: ctx.client.get("/no-such-endpoint", cast_to=object),
                 lambda: ctx.client.post("/chat/completion", cast_to=object, body={"messages": LONG})]:
        try:
            call()
        except openai.NotFoundError as e:
            eq(e.status_code, 404, "status")
            eq(e.type, "not_found_error", "error type")
        else:
            raise AssertionError("no NotFoundError for an unknown route")
    try:
        ctx.client.get("/chat/completions", cast_to=object)
    except openai.APIStatusError as e:
        eq(e.status_code, 405, "GET on a POST route: status")
        assert isinstance(e.body, dict) and e.body.get("message"), f"405 body {e.body!r} is not the JSON error shape"
    else:
        raise AssertionError("no error for GET /v1/chat/completions")


# --- responses ---------------------------------------------------------------


def respond(ctx, **kw):
    kw.setdefault("model", ctx.model)
    kw.setdefault("max_output_tokens", N)
    kw.setdefault("temperature", 0)
    return ctx.client.responses.create(**kw)


@check
def responses_equal_chat(ctx):
    """`instructions` + `input` answer as the chat of a system and a user
    turn; a token limit reached makes the response incomplete."""
    for max_tokens, msgs in [(N, LONG), (16, HI)]:
        chat = ctx.chat([{"role": "system", "content": "Be brief."}] + msgs, max_tokens=max_tokens)
        want = chat.choices[0].message.content
        cut = chat.choices[0].finish_reason == "length"
        for name, inp in [("string input", msgs[0]["content"]),
                          ("message items", [{"role": "user", "type": "message",
                                              "content": [{"type": "input_text", "text": msgs[0]["content"]}]}])]:
            r = respond(ctx, instructions="Be brief.", input=inp, max_output_tokens=max_tokens)
            eq(r.object, "response", f"{name}: object")
            eq(r.output_text, want, f"{name}: text vs chat")
            eq(r.status, "incomplete" if cut else "completed", f"{name}: status")
            if cut:
                eq(r.incomplete_details.reason, "max_output_tokens", f"{name}: incomplete_details")
            eq((r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens),
               counts(chat.usage), f"{name}: usage vs chat")
            eq(r.output[0].role, "assistant", f"{name}: output role")


@check
def responses_stream_events(ctx):
    """The streamed events in OpenAI's order, numbered from 0, whose deltas
    make the final response's text, which is the non-streamed text."""
    want = respond(ctx, input="Say hello.").output_text
    events = list(respond(ctx, input="Say hello.", stream=True))
    types = [e.type for e in events]
    eq(types[:4], ["response.created", "response.in_progress", "response.output_item.added",
                   "response.content_part.added"], "first events")
    eq(types[-4:], ["response.output_text.done", "response.content_part.done",
                    "response.output_item.done", "response.incomplete"], "last events")
    assert set(types[4:-4]) == {"response.output_text.delta"}, f"events between: {types}"
    eq([e.sequence_number for e in events], list(range(len(events))), "sequence numbers")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    eq(text, want, "deltas vs non-streamed text")
    eq(events[-4].text, want, "output_text.done text")
    eq(events[-1].response.output_text, want, "final response text")
    ids = {events[2].item.id} | {e.item_id for e in events[3:-2]}
    eq(len(ids), 1, "one item id throughout")
    status, _, raw = ctx.http("POST", "/v1/responses", {"input": "Hi", "max_output_tokens": 2, "stream": True})
    eq(status, 200, "raw stream status")
    assert b"[DONE]" not in raw, "a Responses stream ends with its last event, not [DONE]"


@check
def responses_refuse_what_they_cannot_do(ctx):
    bad_request(lambda: respond(ctx, input="Hi", previous_response_id="resp_1"), "previous_response_id")
    bad_request(lambda: respond(ctx, input="Hi", tools=[{"type": "web_search"}]), "web_search")
    bad_request(lambda: respond(ctx, input=[{"role": "user", "content": [{"type": "input_image",
                                                                          "image_url": "http://x/y.png"}]}]),
                "input_image")
    bad_request(lambda: respond(ctx, input="Hi", text={"format": {"type": "xml"}}), "xml")
    n = ctx.http_json("POST", "/v1/responses/input_tokens", {"input": "Say hello.", "instructions": "Be brief."})
    chat = ctx.chat([{"role": "system", "content": "Be brief."}] + LONG, max_tokens=1)
    eq(n["input_tokens"], chat.usage.prompt_tokens, "responses input_tokens vs chat prompt_tokens")


# --- Anthropic messages ------------------------------------------------------


def claude(ctx, **kw):
    kw.setdefault("model", ctx.model)
    kw.setdefault("max_tokens", N)
    # This package's typed parameters no longer include the sampling ones;
    # the server reads them as llama-server does.
    kw.setdefault("extra_body", {"temperature": 0})
    return ctx.anthropic.messages.create(**kw)


@check
def anthropic_messages_equal_chat(ctx):
    """`system` + `messages` answer as the chat of the same turns; the stop
    reason and usage in Anthropic's names (cache reads apart)."""
    for system, max_tokens, msgs, reason in [("Be brief.", N, LONG, "max_tokens"), (None, 16, HI, "end_turn")]:
        turns = [{"role": "system", "content": system}] if system else []
        chat = ctx.chat(turns + msgs, max_tokens=max_tokens)
        want = chat.choices[0].message.content
        eq(chat.choices[0].finish_reason, "length" if reason == "max_tokens" else "stop", "chat finish")
        for name, content in [("string", msgs[0]["content"]),
                              ("text blocks", [{"type": "text", "text": msgs[0]["content"]}])]:
            kw = {"system": system} if system else {}
            m = claude(ctx, messages=[{"role": "user", "content": content}], max_tokens=max_tokens, **kw)
            eq((m.type, m.role), ("message", "assistant"), f"{name}: type and role")
            eq(m.content[0].text, want, f"{name}: text vs chat")
            eq((m.stop_reason, m.stop_sequence), (reason, None), f"{name}: stop")
            u = m.usage
            eq((u.input_tokens + (u.cache_read_input_tokens or 0), u.output_tokens),
               (chat.usage.prompt_tokens, chat.usage.completion_tokens), f"{name}: usage vs chat")
    full = claude(ctx, messages=LONG).content[0].text
    word = [w for w in full.split() if full.index(w) > 0 and w.isalpha()][0]
    m = claude(ctx, messages=LONG, stop_sequences=[word])
    eq((m.stop_reason, m.stop_sequence), ("stop_sequence", word), "stop at a stop sequence")
    eq(m.content[0].text, full[: full.index(word)], "text before the stop sequence")


@check
def anthropic_stream(ctx):
    """The package's stream helper rebuilds the non-streamed message, from
    events in Anthropic's order."""
    want = claude(ctx, messages=LONG)
    with ctx.anthropic.messages.stream(model=ctx.model, max_tokens=N, messages=LONG,
                                       extra_body={"temperature": 0}) as s:
        events = list(s)
        final = s.get_final_message()
    eq(final.content[0].text, want.content[0].text, "streamed text")
    eq(final.stop_reason, want.stop_reason, "streamed stop_reason")
    eq(final.usage.output_tokens, want.usage.output_tokens, "streamed output_tokens")
    raw = [e.type for e in events if e.type in ("message_start", "content_block_start", "content_block_delta",
                                                 "content_block_stop", "message_delta", "message_stop")]
    eq(raw[:2], ["message_start", "content_block_start"], "first events")
    eq(raw[-3:], ["content_block_stop", "message_delta", "message_stop"], "last events")
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    eq(text, want.content[0].text, "deltas vs non-streamed text")
    status, _, body = ctx.http("POST", "/v1/messages", {"messages": HI, "max_tokens": 2, "stream": True})
    eq(status, 200, "raw stream status")
    assert b"[DONE]" not in body, "an Anthropic stream ends with message_stop, not [DONE]"


@check
def anthropic_refusals_and_count(ctx):
    for what, kw, word in [
        ("a server tool", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "web_search"),
        ("an image block", {"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}]}, "image"),
        ("a system turn in messages", {"messages": [{"role": "system", "content": "x"}]}, "system"),
    ]:
        kw.setdefault("messages", HI)
        try:
            claude(ctx, **kw)
        except anthropic.BadRequestError as e:
            assert word in str(e), f"{what}: {e}"
        else:
            raise AssertionError(f"{what}: no BadRequestError")
    n = ctx.anthropic.messages.count_tokens(model=ctx.model, system="Be brief.", messages=LONG)
    chat = ctx.chat([{"role": "system", "content": "Be brief."}] + LONG, max_tokens=1)
    eq(n.input_tokens, chat.usage.prompt_tokens, "count_tokens vs chat prompt_tokens")


@check
def server_still_answers_after_errors(ctx):
    r = ctx.chat(LONG)
    check_chat(r, ctx)
    eq(ctx.http_json("GET", "/health"), {"status": "ok"}, "/health")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--api-key", required=True)
    ap.add_argument("-k", dest="only", help="run only the checks whose name contains this")
    args = ap.parse_args()
    ctx = Ctx(args.base_url, args.api_key)
    print(f"openai {openai.__version__} against {ctx.base_url}", flush=True)
    failed = []
    checks = [c for c in CHECKS if c is models_list or not args.only or args.only in c.__name__]
    for fn in checks:
        try:
            fn(ctx)
            print(f"ok   {fn.__name__}", flush=True)
        except Exception as e:  # one failing check must not hide the others
            failed.append(fn.__name__)
            detail = str(e) if isinstance(e, AssertionError) else traceback.format_exc().rstrip()
            print(f"FAIL {fn.__name__}: {detail}", flush=True)
            if fn is models_list:
                break
    summary = f"openai client checks: {len(checks) - len(failed)} of {len(checks)} ok"
    print(summary + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
