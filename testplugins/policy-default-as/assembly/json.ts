// A small strict JSON reader over UTF-8 bytes. It accepts exactly the
// syntax Go's encoding/json accepts (RFC 8259)
// and decodes string values exactly as encoding/json.Unmarshal does: escapes
// including \uXXXX and surrogate pairs, a lone or mismatched surrogate
// escape becomes U+FFFD, and each byte of invalid UTF-8 becomes U+FFFD.

import { ByteBuf, decodeRune, encodeRune, equalsAscii, RUNE_ERROR } from "./bytes";

export const KIND_NULL: i32 = 0;
export const KIND_BOOL: i32 = 1;
export const KIND_NUMBER: i32 = 2;
export const KIND_STRING: i32 = 3;
export const KIND_ARRAY: i32 = 4;
export const KIND_OBJECT: i32 = 5;

// MAX_SETTINGS_DEPTH is how deeply arrays and objects may nest in one
// settings object, the settings object itself included: the limit
// encoding/json applies to a document.
export const MAX_SETTINGS_DEPTH: i32 = 10000;

// A Value is one decoded JSON value. Objects keep their members in document
// order, duplicates included, so the caller can refuse duplicate keys.
export class Value {
  kind: i32;
  flag: bool = false; // the value of a boolean
  str: Uint8Array | null = null; // decoded UTF-8 of a string
  keys: Array<Uint8Array> | null = null; // object member names, in order
  items: Array<Value> | null = null; // array elements or object member values

  constructor(kind: i32) {
    this.kind = kind;
  }
}

// kindName names the JSON kind of v the way error messages say it
// ("got a string").
export function kindName(v: Value): string {
  switch (v.kind) {
    case KIND_NULL: return "null";
    case KIND_BOOL: return "a boolean";
    case KIND_NUMBER: return "a number";
    case KIND_STRING: return "a string";
    case KIND_ARRAY: return "an array";
    default: return "an object";
  }
}

// A Reader parses one JSON document. After parse, failed tells whether the
// input was malformed and message says why.
export class Reader {
  src: Uint8Array;
  maxDepth: i32;
  pos: i32 = 0;
  failed: bool = false;
  message: string = "";

  // A Reader refuses arrays and objects nested more than maxDepth deep.
  constructor(src: Uint8Array, maxDepth: i32) {
    this.src = src;
    this.maxDepth = maxDepth;
  }

  // parse reads the whole input as one JSON value.
  parse(): Value | null {
    this.space();
    const v = this.value();
    if (this.failed) return null;
    this.space();
    if (this.pos < this.src.length) {
      this.bad("after top-level value");
      return null;
    }
    return v;
  }

  private fail(msg: string): void {
    if (!this.failed) {
      this.failed = true;
      this.message = msg;
    }
  }

  // bad reports the byte at pos as unexpected, in the words Go's scanner uses.
  private bad(context: string): void {
    if (this.pos >= this.src.length) {
      this.fail("unexpected end of JSON input");
      return;
    }
    const c = <i32>this.src[this.pos];
    let q: string;
    if (c == 0x27) q = "'\\''";
    else if (c == 0x22) q = "'\"'";
    else if (c >= 0x20 && c < 0x7f) q = "'" + String.fromCharCode(c) + "'";
    else q = "byte 0x" + c.toString(16);
    this.fail("invalid character " + q + " " + context);
  }

  private space(): void {
    const src = this.src;
    while (this.pos < src.length) {
      const c = src[this.pos];
      if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) break;
      this.pos++;
    }
  }

  // value reads one value of any kind. It does not recurse: open arrays
  // and objects are kept on an explicit stack, so deep nesting cannot
  // exhaust the WebAssembly call stack.
  private value(): Value | null {
    const src = this.src;
    const open = new Array<Value>();
    let root: Value | null = null;
    while (true) {
      // A value is expected at pos.
      this.space();
      if (this.pos >= src.length) {
        this.fail("unexpected end of JSON input");
        return null;
      }
      const c = <i32>src[this.pos];
      let v: Value | null = null;
      let container = false;
      if (c == 0x7b || c == 0x5b) {
        if (open.length >= this.maxDepth) {
          this.fail("exceeded max depth");
          return null;
        }
        this.pos++;
        container = true;
        if (c == 0x7b) {
          v = new Value(KIND_OBJECT);
          v.keys = new Array<Uint8Array>();
        } else {
          v = new Value(KIND_ARRAY);
        }
        v.items = new Array<Value>();
      } else if (c == 0x22) {
        const s = this.string();
        if (s === null) return null;
        v = new Value(KIND_STRING);
        v.str = s;
      } else if (c == 0x74) {
        v = this.literal("true", KIND_BOOL, true);
      } else if (c == 0x66) {
        v = this.literal("false", KIND_BOOL, false);
      } else if (c == 0x6e) {
        v = this.literal("null", KIND_NULL, false);
      } else if (c == 0x2d || (c >= 0x30 && c <= 0x39)) {
        v = this.number();
      } else {
        this.bad("looking for beginning of value");
      }
      if (v === null) return null;
      if (open.length == 0) root = v;
      else open[open.length - 1].items!.push(v);

      if (container) {
        open.push(v);
        this.space();
        const closer = v.kind == KIND_OBJECT ? 0x7d : 0x5d;
        if (this.pos < src.length && <i32>src[this.pos] == closer) {
          this.pos++;
          open.pop();
        } else {
          if (v.kind == KIND_OBJECT && !this.key(v)) return null;
          continue;
        }
      }
      // A value has ended: close containers until one goes on.
      while (true) {
        if (open.length == 0) return root;
        const top = open[open.length - 1];
        const isObject = top.kind == KIND_OBJECT;
        this.space();
        if (this.pos >= src.length) {
          this.fail("unexpected end of JSON input");
          return null;
        }
        const d = <i32>src[this.pos];
        if (d == 0x2c) {
          this.pos++;
          if (isObject && !this.key(top)) return null;
          break;
        }
        if (d == (isObject ? 0x7d : 0x5d)) {
          this.pos++;
          open.pop();
          continue;
        }
        this.bad(isObject ? "after object key:value pair" : "after array element");
        return null;
      }
    }
    return null;
  }

  // key reads an object member's name and the colon after it, and appends
  // the name to obj.
  private key(obj: Value): bool {
    this.space();
    if (this.pos >= this.src.length) {
      this.fail("unexpected end of JSON input");
      return false;
    }
    if (this.src[this.pos] != 0x22) {
      this.bad("looking for beginning of object key string");
      return false;
    }
    const k = this.string();
    if (k === null) return false;
    this.space();
    if (this.pos >= this.src.length) {
      this.fail("unexpected end of JSON input");
      return false;
    }
    if (this.src[this.pos] != 0x3a) {
      this.bad("after object key");
      return false;
    }
    this.pos++;
    obj.keys!.push(k);
    return true;
  }

  private literal(word: string, kind: i32, flag: bool): Value | null {
    for (let i = 0; i < word.length; i++) {
      if (this.pos >= this.src.length || <i32>this.src[this.pos] != word.charCodeAt(i)) {
        this.bad("in literal " + word + " (expecting '" + word.charAt(i) + "')");
        return null;
      }
      this.pos++;
    }
    const v = new Value(kind);
    v.flag = flag;
    return v;
  }

  private digit(): bool {
    if (this.pos >= this.src.length) return false;
    const c = this.src[this.pos];
    return c >= 0x30 && c <= 0x39;
  }

  private number(): Value | null {
    const src = this.src;
    if (src[this.pos] == 0x2d) {
      this.pos++;
      if (!this.digit()) {
        this.bad("in numeric literal");
        return null;
      }
    }
    if (src[this.pos] == 0x30) {
      this.pos++;
    } else {
      while (this.digit()) this.pos++;
    }
    if (this.pos < src.length && src[this.pos] == 0x2e) {
      this.pos++;
      if (!this.digit()) {
        this.bad("after decimal point in numeric literal");
        return null;
      }
      while (this.digit()) this.pos++;
    }
    if (this.pos < src.length && (src[this.pos] == 0x65 || src[this.pos] == 0x45)) {
      this.pos++;
      if (this.pos < src.length && (src[this.pos] == 0x2b || src[this.pos] == 0x2d)) this.pos++;
      if (!this.digit()) {
        this.bad("in exponent of numeric literal");
        return null;
      }
      while (this.digit()) this.pos++;
    }
    return new Value(KIND_NUMBER);
  }

  private hex4(at: i32): i32 {
    if (at + 4 > this.src.length) return -1;
    let r = 0;
    for (let i = 0; i < 4; i++) {
      const c = <i32>this.src[at + i];
      let d: i32;
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x61 + 10;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x41 + 10;
      else return -1;
      r = (r << 4) | d;
    }
    return r;
  }

  // string reads a string literal at pos and returns its decoded bytes.
  string(): Uint8Array | null {
    const src = this.src;
    const n = src.length;
    this.pos++; // opening quote
    // Fast path: printable ASCII without escapes decodes to itself.
    const start = this.pos;
    let i = start;
    while (i < n) {
      const c = <i32>src[i];
      if (c == 0x22) {
        this.pos = i + 1;
        return src.slice(start, i);
      }
      if (c == 0x5c || c < 0x20 || c >= 0x80) break;
      i++;
    }
    const out = new ByteBuf(i - start + 16);
    out.bytes(src.subarray(start, i));
    this.pos = i;
    while (true) {
      if (this.pos >= n) {
        this.fail("unexpected end of JSON input");
        return null;
      }
      const c = <i32>src[this.pos];
      if (c == 0x22) {
        this.pos++;
        return out.toBytes();
      }
      if (c < 0x20) {
        this.bad("in string literal");
        return null;
      }
      if (c == 0x5c) {
        this.pos++;
        if (this.pos >= n) {
          this.fail("unexpected end of JSON input");
          return null;
        }
        const e = <i32>src[this.pos];
        if (e == 0x22 || e == 0x5c || e == 0x2f) {
          out.byte(e);
          this.pos++;
        } else if (e == 0x62) {
          out.byte(0x08); this.pos++;
        } else if (e == 0x66) {
          out.byte(0x0c); this.pos++;
        } else if (e == 0x6e) {
          out.byte(0x0a); this.pos++;
        } else if (e == 0x72) {
          out.byte(0x0d); this.pos++;
        } else if (e == 0x74) {
          out.byte(0x09); this.pos++;
        } else if (e == 0x75) {
          this.pos++;
          const r = this.unicodeEscape();
          if (r < 0) return null;
          if (r >= 0xd800 && r < 0xe000) {
            // A surrogate: only a high one directly followed by an escaped
            // low one makes a character; anything else is U+FFFD and the
            // following escape, if any, is read on its own.
            let combined = -1;
            if (r < 0xdc00 && this.pos + 1 < n && src[this.pos] == 0x5c && src[this.pos + 1] == 0x75) {
              const r2 = this.hex4(this.pos + 2);
              if (r2 >= 0xdc00 && r2 < 0xe000) {
                combined = 0x10000 + ((r - 0xd800) << 10) + (r2 - 0xdc00);
                this.pos += 6;
              }
            }
            encodeRune(out, combined >= 0 ? combined : RUNE_ERROR);
          } else {
            encodeRune(out, r);
          }
        } else {
          this.bad("in string escape code");
          return null;
        }
        continue;
      }
      if (c < 0x80) {
        out.byte(c);
        this.pos++;
        continue;
      }
      const d = decodeRune(src, this.pos, n);
      const size = <i32>(d >>> 32);
      const r = <i32>(d & 0xffffffff);
      if (r == RUNE_ERROR && size == 1) {
        encodeRune(out, RUNE_ERROR);
      } else {
        for (let k = 0; k < size; k++) out.byte(src[this.pos + k]);
      }
      this.pos += size;
    }
    return null;
  }

  // unicodeEscape reads the four hex digits after \u.
  private unicodeEscape(): i32 {
    for (let i = 0; i < 4; i++) {
      if (this.pos + i >= this.src.length) {
        this.pos += i;
        this.fail("unexpected end of JSON input");
        return -1;
      }
      const c = <i32>this.src[this.pos + i];
      const ok = (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);
      if (!ok) {
        this.pos += i;
        this.bad("in \\u hexadecimal character escape");
        return -1;
      }
    }
    const r = this.hex4(this.pos);
    this.pos += 4;
    return r;
  }
}

// member returns the value of the last member of object v named name, or
// null when there is none (Go's decoder also keeps the last duplicate).
export function member(v: Value, name: string): Value | null {
  const keys = v.keys!;
  const items = v.items!;
  let found: Value | null = null;
  for (let i = 0; i < keys.length; i++) {
    if (equalsAscii(keys[i], name)) found = items[i];
  }
  return found;
}
