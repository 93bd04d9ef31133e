// The generic `example:types` component (tests/generic/wit/types.wit) in
// JavaScript, built with componentize-js: no Wharf SDK, plain WIT exports.
//
// Every function behaves exactly as the WIT doc comments say; the Rust,
// Python and C versions do the same (tests/all/generic_langs.rs compares
// them). jco's mapping: s64/u64 are BigInt, list<u8> a Uint8Array, records
// objects, variants `{tag, val}`, enums strings, flags `{name: bool}`, a
// `none` is `undefined`, and a thrown value is the `err` of a result.

const isSome = (v) => v !== undefined && v !== null;

export function greet(name) {
  return `Hello, ${name}!`;
}

export const kinds = {
  add(a, b) {
    return (a + b) | 0;
  },
  ints(a, b, c, d, e, f, g, h) {
    return [a, b, c, d, e, f, g, h];
  },
  floats(a, b) {
    return a + b;
  },
  nextChar(c) {
    const n = c.codePointAt(0);
    if (n === 0xd7ff) return String.fromCodePoint(0xe000);
    if (n === 0x10ffff) return String.fromCodePoint(0);
    return String.fromCodePoint(n + 1);
  },
  shout(s) {
    return s.replace(/[a-z]/g, (ch) => ch.toUpperCase()) + "!";
  },
  reverseBytes(data) {
    return Uint8Array.from(data).reverse();
  },
  sum(xs) {
    let acc = 0n;
    for (const x of xs) acc = BigInt.asIntN(64, acc + BigInt(x));
    return acc;
  },
  mid(a, b) {
    const label = isSome(a.label) ? a.label : b.label;
    return { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2, label: isSome(label) ? label : undefined };
  },
  swap([s, n]) {
    return [n, s];
  },
  area(s) {
    switch (s.tag) {
      case "circle":
        return 3.141592653589793 * s.val * s.val;
      case "rect":
        return s.val.x * s.val.y;
      default:
        return 0;
    }
  },
  rotate(c) {
    return { red: "green", green: "blue", blue: "red" }[c];
  },
  toggle(p) {
    return { read: !p.read, write: !p.write, exec: !p.exec };
  },
  double(x) {
    return isSome(x) ? (x * 2) >>> 0 : undefined;
  },
  divide(a, b) {
    if (b === 0) throw "division by zero";
    if (a === -2147483648 && b === -1) throw "overflow";
    return Math.trunc(a / b);
  },
};
