// Byte helpers: a growable output buffer, UTF-8 decoding and encoding with
// the exact rules of Go's unicode/utf8 and encoding/json, and byte order.
// Every string this plugin handles is kept as UTF-8 bytes, never as an
// AssemblyScript (UTF-16) string, so that sorting and comparing work on
// bytes exactly as the Go reference does.

// A ByteBuf is an append-only byte buffer. Writes go straight to memory
// after one capacity check, which matters on batches of megabytes.
export class ByteBuf {
  data: Uint8Array;
  len: i32 = 0;

  constructor(capacity: i32 = 256) {
    this.data = new Uint8Array(capacity < 16 ? 16 : capacity);
  }

  // reserve makes room for extra more bytes.
  @inline reserve(extra: i32): void {
    if (this.len + extra > this.data.length) this.grow(extra);
  }

  private grow(extra: i32): void {
    const need = this.len + extra;
    let cap = this.data.length * 2;
    if (cap < need) cap = need;
    const next = new Uint8Array(cap);
    memory.copy(next.dataStart, this.data.dataStart, <usize>this.len);
    this.data = next;
  }

  // put writes b at the end without a capacity check (see reserve).
  @inline put(b: i32): void {
    store<u8>(this.data.dataStart + <usize>this.len, <u8>b);
    this.len++;
  }

  byte(b: i32): void {
    this.reserve(1);
    this.put(b);
  }

  bytes(src: Uint8Array): void {
    this.reserve(src.length);
    memory.copy(this.data.dataStart + <usize>this.len, src.dataStart, <usize>src.length);
    this.len += src.length;
  }

  // ascii appends s, which must hold only ASCII characters.
  ascii(s: string): void {
    const n = s.length;
    this.reserve(n);
    for (let i = 0; i < n; i++) this.put(<i32>s.charCodeAt(i));
  }

  // int appends the decimal form of a non-negative integer.
  int(v: i32): void {
    this.ascii(v.toString());
  }

  // goString appends src as a JSON string the way Go's encoding/json.Marshal
  // writes it with HTML escaping on: `"` and `\` escaped, \b \f \n \r \t
  // short forms, other control characters and < > & as \u00XX, U+2028 and
  // U+2029 as \u2028 and \u2029, and each byte of invalid UTF-8 as \ufffd.
  goString(src: Uint8Array): void {
    const n = src.length;
    // Every input byte becomes at most 6 output bytes.
    this.reserve(6 * n + 2);
    this.put(0x22);
    const p = src.dataStart;
    let i = 0;
    while (i < n) {
      const b = <i32>load<u8>(p + <usize>i);
      if (b < 0x80) {
        if (b >= 0x20 && b != 0x22 && b != 0x5c && b != 0x3c && b != 0x3e && b != 0x26) {
          this.put(b);
        } else if (b == 0x22 || b == 0x5c) {
          this.put(0x5c);
          this.put(b);
        } else if (b == 0x08) {
          this.put(0x5c); this.put(0x62);
        } else if (b == 0x0c) {
          this.put(0x5c); this.put(0x66);
        } else if (b == 0x0a) {
          this.put(0x5c); this.put(0x6e);
        } else if (b == 0x0d) {
          this.put(0x5c); this.put(0x72);
        } else if (b == 0x09) {
          this.put(0x5c); this.put(0x74);
        } else {
          this.put(0x5c); this.put(0x75); this.put(0x30); this.put(0x30);
          this.put(hexDigit(b >> 4));
          this.put(hexDigit(b & 0xf));
        }
        i++;
        continue;
      }
      const r = decodeRune(src, i, n);
      const size = <i32>(r >>> 32);
      const c = <i32>(r & 0xffffffff);
      if (c == RUNE_ERROR && size == 1) {
        this.putAscii6("\\ufffd");
      } else if (c == 0x2028) {
        this.putAscii6("\\u2028");
      } else if (c == 0x2029) {
        this.putAscii6("\\u2029");
      } else {
        for (let k = 0; k < size; k++) this.put(<i32>load<u8>(p + <usize>(i + k)));
      }
      i += size;
    }
    this.put(0x22);
  }

  // putAscii6 writes a six-character escape; room was reserved.
  private putAscii6(s: string): void {
    for (let k = 0; k < 6; k++) this.put(<i32>s.charCodeAt(k));
  }

  // toBytes returns a fresh array holding exactly the bytes written.
  toBytes(): Uint8Array {
    return this.data.slice(0, this.len);
  }
}

@inline function hexDigit(d: i32): i32 {
  return d < 10 ? 0x30 + d : 0x57 + d;
}

export const RUNE_ERROR: i32 = 0xfffd;

// decodeRune decodes the UTF-8 sequence at src[i:n] as Go's
// utf8.DecodeRune does and returns (size << 32) | rune. Invalid or
// truncated sequences, overlong forms, surrogates and values above
// U+10FFFF decode as (1, U+FFFD).
export function decodeRune(src: Uint8Array, i: i32, n: i32): u64 {
  const b0 = <i32>src[i];
  if (b0 < 0x80) return (<u64>1 << 32) | <u64>b0;
  let size = 0;
  let lo = 0x80;
  let hi = 0xbf;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    size = 2;
  } else if (b0 == 0xe0) {
    size = 3; lo = 0xa0;
  } else if (b0 >= 0xe1 && b0 <= 0xec) {
    size = 3;
  } else if (b0 == 0xed) {
    size = 3; hi = 0x9f;
  } else if (b0 >= 0xee && b0 <= 0xef) {
    size = 3;
  } else if (b0 == 0xf0) {
    size = 4; lo = 0x90;
  } else if (b0 >= 0xf1 && b0 <= 0xf3) {
    size = 4;
  } else if (b0 == 0xf4) {
    size = 4; hi = 0x8f;
  } else {
    return (<u64>1 << 32) | <u64>RUNE_ERROR;
  }
  if (i + size > n) {
    // Truncated: Go still reports size 1.
    return (<u64>1 << 32) | <u64>RUNE_ERROR;
  }
  const b1 = <i32>src[i + 1];
  if (b1 < lo || b1 > hi) return (<u64>1 << 32) | <u64>RUNE_ERROR;
  if (size == 2) {
    return (<u64>2 << 32) | <u64>(((b0 & 0x1f) << 6) | (b1 & 0x3f));
  }
  const b2 = <i32>src[i + 2];
  if (b2 < 0x80 || b2 > 0xbf) return (<u64>1 << 32) | <u64>RUNE_ERROR;
  if (size == 3) {
    return (<u64>3 << 32) | <u64>(((b0 & 0x0f) << 12) | ((b1 & 0x3f) << 6) | (b2 & 0x3f));
  }
  const b3 = <i32>src[i + 3];
  if (b3 < 0x80 || b3 > 0xbf) return (<u64>1 << 32) | <u64>RUNE_ERROR;
  return (<u64>4 << 32) |
    <u64>(((b0 & 0x07) << 18) | ((b1 & 0x3f) << 12) | ((b2 & 0x3f) << 6) | (b3 & 0x3f));
}

// encodeRune appends the UTF-8 encoding of the code point r, which must be
// a valid scalar value (not a surrogate, at most U+10FFFF).
export function encodeRune(out: ByteBuf, r: i32): void {
  if (r < 0x80) {
    out.byte(r);
  } else if (r < 0x800) {
    out.byte(0xc0 | (r >> 6));
    out.byte(0x80 | (r & 0x3f));
  } else if (r < 0x10000) {
    out.byte(0xe0 | (r >> 12));
    out.byte(0x80 | ((r >> 6) & 0x3f));
    out.byte(0x80 | (r & 0x3f));
  } else {
    out.byte(0xf0 | (r >> 18));
    out.byte(0x80 | ((r >> 12) & 0x3f));
    out.byte(0x80 | ((r >> 6) & 0x3f));
    out.byte(0x80 | (r & 0x3f));
  }
}

// compareBytes orders a and b by their bytes, like Go's strings.Compare.
export function compareBytes(a: Uint8Array, b: Uint8Array): i32 {
  const la = a.length;
  const lb = b.length;
  const n = la < lb ? la : lb;
  const pa = a.dataStart;
  const pb = b.dataStart;
  for (let i = 0; i < n; i++) {
    const x = <i32>load<u8>(pa + <usize>i);
    const y = <i32>load<u8>(pb + <usize>i);
    if (x != y) return x < y ? -1 : 1;
  }
  if (la == lb) return 0;
  return la < lb ? -1 : 1;
}

// equalsAscii reports whether the bytes of a are exactly the ASCII string s.
export function equalsAscii(a: Uint8Array, s: string): bool {
  if (a.length != s.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (<i32>a[i] != s.charCodeAt(i)) return false;
  }
  return true;
}

// utf8 returns the UTF-8 bytes of an AssemblyScript string.
export function utf8(s: string): Uint8Array {
  return Uint8Array.wrap(String.UTF8.encode(s));
}
