// The default policy: strict settings parsing, the canonical form (which is
// also the metadata key) and the tool/prompt filter. The rules and messages
// are those of the native reference, package metakey, in wasmhost.

import { ByteBuf, compareBytes, decodeRune, equalsAscii } from "./bytes";
import { PRINT_RANGES } from "./isprint";
import {
  KIND_ARRAY, KIND_BOOL, KIND_NULL, KIND_OBJECT, KIND_STRING, Value, kindName,
} from "./json";

export const TRUST_NULL: i32 = 0;
export const TRUST_FALSE: i32 = 1;
export const TRUST_TRUE: i32 = 2;

// A Canonical is the canonical form of one settings object.
export class Canonical {
  trust: i32 = TRUST_NULL;
  alwaysLoadTools: bool = false;
  // include is null when every name is allowed; an empty list allows none.
  // Sorted by bytes, no duplicates, each entry cut at its first "(".
  include: Array<Uint8Array> | null = null;
  // exclude is sorted by bytes, without duplicates, entries never cut.
  exclude: Array<Uint8Array> = new Array<Uint8Array>();

  // appendJSON writes the compact canonical JSON, which is the metadata key:
  // keys in the order trust, alwaysLoadTools, includeTools, excludeTools.
  appendJSON(out: ByteBuf): void {
    out.ascii('{"trust":');
    out.ascii(this.trust == TRUST_NULL ? "null" : this.trust == TRUST_TRUE ? "true" : "false");
    out.ascii(',"alwaysLoadTools":');
    out.ascii(this.alwaysLoadTools ? "true" : "false");
    out.ascii(',"includeTools":');
    const include = this.include;
    if (include === null) {
      out.ascii("null");
    } else {
      appendList(out, include);
    }
    out.ascii(',"excludeTools":');
    appendList(out, this.exclude);
    out.byte(0x7d);
  }

  // visible reports whether a tool or prompt called name is shown: a
  // non-empty name, allowed by include and not hidden by exclude.
  visible(name: Uint8Array): bool {
    if (name.length == 0) return false;
    const include = this.include;
    if (include !== null && !contains(include, name)) return false;
    return !contains(this.exclude, name);
  }
}

function appendList(out: ByteBuf, list: Array<Uint8Array>): void {
  out.byte(0x5b);
  for (let i = 0; i < list.length; i++) {
    if (i > 0) out.byte(0x2c);
    out.goString(list[i]);
  }
  out.byte(0x5d);
}

// contains binary-searches the sorted list for name.
function contains(list: Array<Uint8Array>, name: Uint8Array): bool {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const c = compareBytes(list[mid], name);
    if (c == 0) return true;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return false;
}

// sortedSet sorts list by bytes and drops repeated entries.
function sortedSet(list: Array<Uint8Array>): Array<Uint8Array> {
  if (list.length < 2) return list;
  list.sort(compareBytes);
  const out = new Array<Uint8Array>();
  out.push(list[0]);
  for (let i = 1; i < list.length; i++) {
    if (compareBytes(list[i], out[out.length - 1]) != 0) out.push(list[i]);
  }
  return out;
}

// cutAtParen returns s up to, not including, its first "(".
function cutAtParen(s: Uint8Array): Uint8Array {
  for (let i = 0; i < s.length; i++) {
    if (s[i] == 0x28) return s.slice(0, i);
  }
  return s;
}

// A Parsed is the outcome of parseSettings: canonical when the settings
// are accepted, otherwise refusal holds the message (UTF-8).
export class Parsed {
  canonical: Canonical | null = null;
  refusal: Uint8Array | null = null;
}

function refuse(msg: ByteBuf): Parsed {
  const p = new Parsed();
  p.refusal = msg.toBytes();
  return p;
}

function refuseText(msg: string): Parsed {
  const b = new ByteBuf(msg.length);
  b.ascii(msg);
  return refuse(b);
}

// parseSettings checks one decoded settings value and returns its canonical
// form or the first problem in document order: a value that is not an
// object, a repeated key (any key, compared after unescaping), a trust or
// alwaysLoadTools value that is neither a boolean nor null, an includeTools
// or excludeTools value that is neither an array of strings nor null. Keys
// other than the four settings are otherwise ignored.
export function parseSettings(v: Value): Parsed {
  if (v.kind != KIND_OBJECT) {
    return refuseText("expected an object, got " + kindName(v));
  }
  const keys = v.keys!;
  const items = v.items!;
  const c = new Canonical();
  const seen = new Set<string>();
  let include: Array<Uint8Array> | null = null;
  let exclude: Array<Uint8Array> | null = null;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    // Decoded keys are valid UTF-8, so this string stands for the key
    // exactly.
    const id = String.UTF8.decodeUnsafe(key.dataStart, <usize>key.length);
    if (seen.has(id)) {
      const msg = new ByteBuf(32);
      msg.ascii("duplicate key ");
      goQuote(msg, key);
      return refuse(msg);
    }
    seen.add(id);
    const item = items[i];
    if (equalsAscii(key, "trust") || equalsAscii(key, "alwaysLoadTools")) {
      if (item.kind != KIND_BOOL && item.kind != KIND_NULL) {
        return refuseText(id + ": expected a boolean or null, got " + kindName(item));
      }
      if (id == "trust") {
        c.trust = item.kind == KIND_NULL ? TRUST_NULL : item.flag ? TRUST_TRUE : TRUST_FALSE;
      } else {
        c.alwaysLoadTools = item.kind == KIND_BOOL && item.flag;
      }
    } else if (equalsAscii(key, "includeTools") || equalsAscii(key, "excludeTools")) {
      let list: Array<Uint8Array> | null = null;
      if (item.kind == KIND_ARRAY) {
        const elems = item.items!;
        const names = new Array<Uint8Array>(elems.length);
        for (let j = 0; j < elems.length; j++) {
          const e = elems[j];
          if (e.kind != KIND_STRING) {
            return refuseText(id + "[" + j.toString() + "]: expected a string, got " + kindName(e));
          }
          names[j] = e.str!;
        }
        list = names;
      } else if (item.kind != KIND_NULL) {
        return refuseText(id + ": expected an array of strings or null, got " + kindName(item));
      }
      if (id == "includeTools") include = list;
      else exclude = list;
    }
  }
  if (include !== null) {
    for (let j = 0; j < include.length; j++) include[j] = cutAtParen(include[j]);
    c.include = sortedSet(include);
  }
  if (exclude !== null) c.exclude = sortedSet(exclude);
  const p = new Parsed();
  p.canonical = c;
  return p;
}

const HEX = "0123456789abcdef";

function isPrint(r: u32): bool {
  // Binary search over the inclusive [lo, hi] pairs.
  let lo = 0;
  let hi = PRINT_RANGES.length >> 1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (r < PRINT_RANGES[mid << 1]) {
      hi = mid;
    } else if (r > PRINT_RANGES[(mid << 1) + 1]) {
      lo = mid + 1;
    } else {
      return true;
    }
  }
  return false;
}

function hexDigits(out: ByteBuf, r: u32, digits: i32): void {
  for (let s = (digits - 1) * 4; s >= 0; s -= 4) {
    out.byte(HEX.charCodeAt(<i32>((r >> <u32>s) & 0xf)));
  }
}

// goQuote appends s quoted the way Go's strconv.Quote (fmt's %q) quotes a
// string: printable runes kept, `"` and `\` backslashed, \a \b \f \n \r \t
// \v short forms, other runes below U+0020 and U+007F as \xXX, other
// non-printable runes as \uXXXX or \UXXXXXXXX, invalid UTF-8 bytes as \xXX.
export function goQuote(out: ByteBuf, s: Uint8Array): void {
  out.byte(0x22);
  let i = 0;
  const n = s.length;
  while (i < n) {
    const d = decodeRune(s, i, n);
    const size = <i32>(d >>> 32);
    const r = <u32>(d & 0xffffffff);
    if (size == 1 && r == 0xfffd) {
      out.ascii("\\x");
      hexDigits(out, <u32>s[i], 2);
      i++;
      continue;
    }
    if (r == 0x22 || r == 0x5c) {
      out.byte(0x5c);
      out.byte(<i32>r);
    } else if (isPrint(r)) {
      for (let k = 0; k < size; k++) out.byte(s[i + k]);
    } else if (r == 0x07) {
      out.ascii("\\a");
    } else if (r == 0x08) {
      out.ascii("\\b");
    } else if (r == 0x0c) {
      out.ascii("\\f");
    } else if (r == 0x0a) {
      out.ascii("\\n");
    } else if (r == 0x0d) {
      out.ascii("\\r");
    } else if (r == 0x09) {
      out.ascii("\\t");
    } else if (r == 0x0b) {
      out.ascii("\\v");
    } else if (r < 0x20 || r == 0x7f) {
      out.ascii("\\x");
      hexDigits(out, r, 2);
    } else if (r < 0x10000) {
      out.ascii("\\u");
      hexDigits(out, r, 4);
    } else {
      out.ascii("\\U");
      hexDigits(out, r, 8);
    }
    i += size;
  }
  out.byte(0x22);
}
