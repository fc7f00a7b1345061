"""A GBNF recogniser, written apart from Kestrel's grammar code so that it
can judge what the server generates under a grammar.

It reads llama.cpp's GBNF (rules `name ::= alternatives`, string literals,
character classes with ranges and `^`, `.`, groups, `* + ?` and `{m}`,
`{m,}`, `{m,n}`, `#` comments) into a context-free grammar over Unicode
code points, and answers with an Earley recogniser whether a whole text
derives from `root` (or, for a text cut short, whether it can still be
extended to one). Token references (`<[id]>`, `<|name|>`) are refused.

    python3 scripts/gbnf_recognizer.py GRAMMAR.gbnf TEXTFILE
"""
import sys


class GbnfError(ValueError):
    pass


class CharSet:
    """One code point out of ranges, or (negated) any code point outside them."""

    def __init__(self, ranges, negated=False):
        self.ranges = ranges
        self.negated = negated

    def __contains__(self, ch):
        cp = ord(ch)
        inside = any(lo <= cp <= hi for lo, hi in self.ranges)
        return inside != self.negated

    def __repr__(self):
        body = "".join(chr(lo) if lo == hi else f"{chr(lo)}-{chr(hi)}" for lo, hi in self.ranges)
        return f"[{'^' if self.negated else ''}{body}]"


ANY = CharSet([], negated=True)

# ---------------------------------------------------------------- lexing

_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"',
                   "[": "[", "]": "]", "-": "-", "^": "^", "/": "/"}


def _name_char(c):
    return c.isascii() and (c.isalnum() or c in "_-")


def _escape(src, i):
    """Reads the escape whose backslash is at src[i]; returns (char, next)."""
    if i + 1 >= len(src):
        raise GbnfError("a backslash ends the grammar")
    c = src[i + 1]
    width = {"x": 2, "u": 4, "U": 8}.get(c)
    if width:
        digits = src[i + 2:i + 2 + width]
        if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise GbnfError(f"bad \\{c} escape at offset {i}")
        return chr(int(digits, 16)), i + 2 + width
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], i + 2
    raise GbnfError(f"unknown escape \\{c} at offset {i}")


def _tokens(src):
    """(kind, value, offset) for the grammar text: name, define, literal,
    class, any, and the punctuation ( ) | * + ? and repeat (m, n)."""
    out = []
    i = 0
    while i < len(src):
        c = src[i]
        if c in " \t\r\n":
            i += 1
        elif c == "#":
            while i < len(src) and src[i] != "\n":
                i += 1
        elif src.startswith("::=", i):
            out.append(("define", None, i))
            i += 3
        elif _name_char(c):
            j = i
            while j < len(src) and _name_char(src[j]):
                j += 1
            out.append(("name", src[i:j], i))
            i = j
        elif c == '"':
            j = i + 1
            chars = []
            while True:
                if j >= len(src):
                    raise GbnfError(f"unterminated string at offset {i}")
                if src[j] == '"':
                    break
                if src[j] == "\\":
                    ch, j = _escape(src, j)
                else:
                    ch, j = src[j], j + 1
                chars.append(ch)
            out.append(("literal", "".join(chars), i))
            i = j + 1
        elif c == "[":
            j = i + 1
            negated = j < len(src) and src[j] == "^"
            if negated:
                j += 1
            ranges = []
            while True:
                if j >= len(src):
                    raise GbnfError(f"unterminated character class at offset {i}")
                if src[j] == "]":
                    break
                lo, j = _escape(src, j) if src[j] == "\\" else (src[j], j + 1)
                hi = lo
                if j + 1 < len(src) and src[j] == "-" and src[j + 1] != "]":
                    hi, j = _escape(src, j + 1) if src[j + 1] == "\\" else (src[j + 1], j + 2)
                ranges.append((ord(lo), ord(hi)))
            out.append(("class", CharSet(ranges, negated), i))
            i = j + 1
        elif c == ".":
            out.append(("class", ANY, i))
            i += 1
        elif c in "()|*+?":
            out.append((c, None, i))
            i += 1
        elif c == "{":
            j = src.find("}", i)
            if j < 0:
                raise GbnfError(f"unterminated repetition at offset {i}")
            parts = src[i + 1:j].replace(" ", "").split(",")
            try:
                if len(parts) == 1:
                    m = n = int(parts[0])
                elif len(parts) == 2:
                    m = int(parts[0])
                    n = int(parts[1]) if parts[1] else None
                else:
                    raise ValueError
            except ValueError:
                raise GbnfError(f"bad repetition {src[i:j + 1]!r} at offset {i}") from None
            if n is not None and n < m:
                raise GbnfError(f"repetition {src[i:j + 1]!r} has max below min")
            out.append(("repeat", (m, n), i))
            i = j + 1
        elif c in "<!":
            raise GbnfError(f"token references are not supported (offset {i})")
        else:
            raise GbnfError(f"unexpected {c!r} at offset {i}")
    return out


# ---------------------------------------------------------------- parsing


class Grammar:
    """rules: name -> list of alternatives, each a list of symbols; a
    symbol is a rule name (str) or a CharSet."""

    def __init__(self, text, start="root"):
        self.rules = {}
        self._aux = 0
        toks = _tokens(text)
        starts = [k for k in range(len(toks) - 1)
                  if toks[k][0] == "name" and toks[k + 1][0] == "define"]
        if not starts or starts[0] != 0:
            raise GbnfError("the grammar does not begin with a rule")
        bodies = []
        for a, b in zip(starts, starts[1:] + [len(toks)]):
            name = toks[a][1]
            if name in self.rules:
                raise GbnfError(f"rule {name!r} is defined twice")
            self.rules[name] = None
            bodies.append((name, toks[a + 2:b]))
        for name, body in bodies:
            alts, pos = self._alternates(body, 0)
            if pos != len(body):
                raise GbnfError(f"unexpected {body[pos][0]!r} in rule {name!r}")
            self.rules[name] = alts
        for name, alts in self.rules.items():
            for alt in alts:
                for sym in alt:
                    if isinstance(sym, str) and sym not in self.rules:
                        raise GbnfError(f"rule {name!r} names undefined rule {sym!r}")
        if start not in self.rules:
            raise GbnfError(f"no {start!r} rule")
        self.start = start
        self.nullable = self._nullable()

    def _new_rule(self, alts):
        self._aux += 1
        name = f" aux{self._aux}"  # a space: no GBNF name can clash
        self.rules[name] = alts
        return name

    def _alternates(self, toks, pos):
        alts = []
        while True:
            seq, pos = self._sequence(toks, pos)
            alts.append(seq)
            if pos < len(toks) and toks[pos][0] == "|":
                pos += 1
                continue
            return alts, pos

    def _sequence(self, toks, pos):
        seq = []
        while pos < len(toks):
            kind, value, _ = toks[pos]
            if kind == "literal":
                atom = [CharSet([(ord(c), ord(c))]) for c in value]
                pos += 1
            elif kind == "class":
                atom = [value]
                pos += 1
            elif kind == "name":
                atom = [value]
                pos += 1
            elif kind == "(":
                alts, pos = self._alternates(toks, pos + 1)
                if pos >= len(toks) or toks[pos][0] != ")":
                    raise GbnfError("unclosed group")
                atom = [self._new_rule(alts)]
                pos += 1
            else:
                return seq, pos
            while pos < len(toks) and toks[pos][0] in ("*", "+", "?", "repeat"):
                atom = [self._repeat(atom, toks[pos])]
                pos += 1
            seq.extend(atom)
        return seq, pos

    def _repeat(self, atom, tok):
        """One symbol deriving atom repeated. Unbounded repetition is left
        recursive, which an Earley recogniser runs in linear time."""
        x = atom[0] if len(atom) == 1 else self._new_rule([atom])
        kind = tok[0]
        if kind == "*":
            return self._star(x)
        if kind == "+":
            r = self._new_rule(None)
            self.rules[r] = [[x], [r, x]]
            return r
        if kind == "?":
            return self._new_rule([[], [x]])
        m, n = tok[1]
        tail = []
        if n is None:
            tail = [self._star(x)]
        elif n > m:
            # (x (x (x)?)?)? with n - m levels.
            opt = self._new_rule([[], [x]])
            for _ in range(n - m - 1):
                opt = self._new_rule([[], [x, opt]])
            tail = [opt]
        return self._new_rule([[x] * m + tail])

    def _star(self, x):
        r = self._new_rule(None)
        self.rules[r] = [[], [r, x]]
        return r

    def _nullable(self):
        nullable = set()
        changed = True
        while changed:
            changed = False
            for name, alts in self.rules.items():
                if name not in nullable and any(
                        all(isinstance(s, str) and s in nullable for s in alt) for alt in alts):
                    nullable.add(name)
                    changed = True
        return nullable

    # ------------------------------------------------------------ matching

    def match(self, text):
        """(status, offset): "full" if text derives from the start rule,
        "prefix" if some longer text would, else "fail" with the offset of
        the first code point no derivation can take."""
        start = " start"
        rules = dict(self.rules)
        rules[start] = [[self.start]]
        nullable = self.nullable
        n = len(text)
        # sets[i]: the items (lhs, alt, dot, origin) after i code points;
        # waiting[i]: symbol -> items of sets[i] whose next symbol it is.
        sets = [set() for _ in range(n + 1)]
        waiting = [dict() for _ in range(n + 1)]
        first = (start, 0, 0, 0)
        sets[0].add(first)
        agenda = [first]
        for i in range(n + 1):
            if i > 0:
                if not sets[i]:
                    return "fail", i - 1
                agenda = list(sets[i])
            ch = text[i] if i < n else None
            while agenda:
                item = agenda.pop()
                lhs, alt, dot, origin = item
                rhs = rules[lhs][alt]
                if dot == len(rhs):
                    for w in waiting[origin].get(lhs, ()):
                        adv = (w[0], w[1], w[2] + 1, w[3])
                        if adv not in sets[i]:
                            sets[i].add(adv)
                            agenda.append(adv)
                    continue
                sym = rhs[dot]
                if isinstance(sym, str):
                    waiting[i].setdefault(sym, []).append(item)
                    for k in range(len(rules[sym])):
                        new = (sym, k, 0, i)
                        if new not in sets[i]:
                            sets[i].add(new)
                            agenda.append(new)
                    if sym in nullable:
                        adv = (lhs, alt, dot + 1, origin)
                        if adv not in sets[i]:
                            sets[i].add(adv)
                            agenda.append(adv)
                elif ch is not None and ch in sym:
                    sets[i + 1].add((lhs, alt, dot + 1, origin))
        if (start, 0, 1, 0) in sets[n]:
            return "full", n
        return "prefix", n


def describe_failure(text, offset, width=30):
    lo = max(0, offset - width)
    return f"at code point {offset}: {text[lo:offset]!r} then {text[offset:offset + width]!r}"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        g = Grammar(f.read())
    with open(sys.argv[2], encoding="utf-8") as f:
        t = f.read()
    status, off = g.match(t)
    print(status if status != "fail" else "fail " + describe_failure(t, off))
    sys.exit(0 if status == "full" else 1)
