// policy-default-as: the default wasmhost policy (ABI v1) written in
// AssemblyScript with @extism/as-pdk. It gives the same canonical forms,
// metadata keys, refusal messages and projections as plugins/policy-default
// (Go) and the native reference metakey; the conformance suite
// conformance/golden/default checks that.
//
// Exports: handshake, canonicalize, project. Each returns 0 with the answer
// as the Extism output, or 1 with the Extism error set.

import { Host, Memory } from "@extism/as-pdk";
import { error_set } from "@extism/as-pdk/lib/env";
import { ByteBuf, utf8 } from "./bytes";
import {
  KIND_ARRAY, KIND_NULL, KIND_OBJECT, KIND_STRING, MAX_SETTINGS_DEPTH, Reader, Value, kindName,
} from "./json";
import { Canonical, Parsed, TRUST_TRUE, parseSettings } from "./settings";

// MAX_KEY_BYTES is abi.MaxKeyBytes: settings whose canonical JSON (the key)
// would be longer are refused.
const MAX_KEY_BYTES: i32 = 64 << 10;

const HANDSHAKE = '{"abi":1,"name":"policy-default-as","version":"1.0.0"}';

// fail sets the Extism error of the current call and returns 1.
function fail(msg: Uint8Array): i32 {
  const mem = Memory.allocateBytes(msg);
  error_set(mem.offset);
  return 1;
}

function failText(msg: string): i32 {
  return fail(utf8(msg));
}

// concat joins an ASCII prefix and a UTF-8 message.
function concat(prefix: string, msg: Uint8Array): Uint8Array {
  const b = new ByteBuf(prefix.length + msg.length);
  b.ascii(prefix);
  b.bytes(msg);
  return b.toBytes();
}

// pluginAbort replaces AssemblyScript's abort (a failed assertion, an index
// out of range, running out of memory): it reports the reason as the Extism
// error, then traps.
function pluginAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  let text = "policy-default-as: abort";
  if (message !== null) text += ": " + message;
  if (fileName !== null) text += " at " + fileName + ":" + line.toString() + ":" + column.toString();
  failText(text);
  unreachable();
}

// readRequest parses the call's input, which must be a JSON object.
// On failure it sets the error (prefixed with what) and returns null.
// depth is how many arrays and objects of the request enclose one settings
// object.
function readRequest(what: string, depth: i32): Value | null {
  const r = new Reader(Host.input(), MAX_SETTINGS_DEPTH + depth);
  const v = r.parse();
  if (v === null) {
    failText(what + ": malformed JSON at byte " + r.pos.toString() + ": " + r.message);
    return null;
  }
  if (v.kind != KIND_OBJECT) {
    failText(what + ": expected an object, got " + kindName(v));
    return null;
  }
  return v;
}

export function handshake(): i32 {
  Host.output(utf8(HANDSHAKE));
  return 0;
}

// canonicalize answers {"settings":[S, ...]} with {"results":[R, ...]},
// where R is {"canonical":C,"key":"C"} or {"error":"why S is refused"}.
// Only a malformed request as a whole fails the call.
export function canonicalize(): i32 {
  const req = readRequest("canonicalize request", 2);
  if (req === null) return 1;
  const out = new ByteBuf(1024);
  out.ascii('{"results":[');
  const keys = req.keys!;
  const items = req.items!;
  let settings: Value | null = null;
  for (let i = 0; i < keys.length; i++) {
    // A repeated member replaces the earlier one, as in encoding/json.
    if (keys[i].length == 8 && String.UTF8.decodeUnsafe(keys[i].dataStart, 8) == "settings") {
      settings = items[i];
    }
  }
  if (settings !== null && settings.kind != KIND_NULL) {
    if (settings.kind != KIND_ARRAY) {
      return failText("canonicalize request: settings: expected an array or null, got " + kindName(settings));
    }
    const list = settings.items!;
    const canon = new ByteBuf(128);
    for (let i = 0; i < list.length; i++) {
      if (i > 0) out.byte(0x2c);
      const p = parseSettings(list[i]);
      const refusal = p.refusal;
      if (refusal !== null) {
        out.ascii('{"error":');
        out.goString(refusal);
        out.byte(0x7d);
        continue;
      }
      canon.len = 0;
      p.canonical!.appendJSON(canon);
      if (canon.len > MAX_KEY_BYTES) {
        // The key would be longer than ABI v1 allows: refuse this object.
        out.ascii('{"error":"canonical form is ' + canon.len.toString() +
          " bytes, more than the " + MAX_KEY_BYTES.toString() + ' bytes a key may hold"}');
        continue;
      }
      const bytes = canon.toBytes();
      out.ascii('{"canonical":');
      out.bytes(bytes);
      out.ascii(',"key":');
      out.goString(bytes);
      out.byte(0x7d);
    }
  }
  out.ascii("]}");
  Host.output(out.toBytes());
  return 0;
}

// A Names is one list of a project request: the names (null elements
// decode as empty names, as encoding/json does) or an error.
class Names {
  names: Array<Uint8Array> = new Array<Uint8Array>();
  error: string = "";
}

function readNames(list: string, v: Value | null): Names {
  const out = new Names();
  if (v === null || v.kind == KIND_NULL) return out;
  if (v.kind != KIND_ARRAY) {
    out.error = list + ": expected an array or null, got " + kindName(v);
    return out;
  }
  const items = v.items!;
  const empty = new Uint8Array(0);
  for (let i = 0; i < items.length; i++) {
    const e = items[i];
    if (e.kind == KIND_STRING) {
      out.names.push(e.str!);
    } else if (e.kind == KIND_NULL) {
      out.names.push(empty);
    } else {
      out.error = list + "[" + i.toString() + "]: expected a string, got " + kindName(e);
      return out;
    }
  }
  return out;
}

// project answers {"settings":S,"tools":[...],"prompts":[...],
// "resources":[...]} with the indexes of what the session sees:
// {"tools":[{"i":N,"trust":B,"alwaysLoad":B}, ...],"prompts":[N, ...],
// "resources":[N, ...]}. Refused settings fail the call.
export function project(): i32 {
  const req = readRequest("project request", 1);
  if (req === null) return 1;
  const keys = req.keys!;
  const items = req.items!;
  let settings: Value | null = null;
  let tools: Value | null = null;
  let prompts: Value | null = null;
  let resources: Value | null = null;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i];
    const name = String.UTF8.decodeUnsafe(k.dataStart, <usize>k.length);
    if (name == "settings") settings = items[i];
    else if (name == "tools") tools = items[i];
    else if (name == "prompts") prompts = items[i];
    else if (name == "resources") resources = items[i];
  }
  const toolNames = readNames("tools", tools);
  if (toolNames.error != "") return failText("project request: " + toolNames.error);
  const promptNames = readNames("prompts", prompts);
  if (promptNames.error != "") return failText("project request: " + promptNames.error);
  const resourceNames = readNames("resources", resources);
  if (resourceNames.error != "") return failText("project request: " + resourceNames.error);
  if (settings === null) return failText("project request: settings: missing");
  const p: Parsed = parseSettings(settings);
  const refusal = p.refusal;
  if (refusal !== null) return fail(concat("project: settings refused: ", refusal));
  const c: Canonical = p.canonical!;

  const trust = c.trust == TRUST_TRUE ? "true" : "false";
  const always = c.alwaysLoadTools ? "true" : "false";
  const out = new ByteBuf(64 + 40 * toolNames.names.length);
  out.ascii('{"tools":[');
  let n = 0;
  for (let i = 0; i < toolNames.names.length; i++) {
    if (!c.visible(toolNames.names[i])) continue;
    if (n > 0) out.byte(0x2c);
    n++;
    out.ascii('{"i":');
    out.int(i);
    out.ascii(',"trust":');
    out.ascii(trust);
    out.ascii(',"alwaysLoad":');
    out.ascii(always);
    out.byte(0x7d);
  }
  out.ascii('],"prompts":[');
  n = 0;
  for (let i = 0; i < promptNames.names.length; i++) {
    if (!c.visible(promptNames.names[i])) continue;
    if (n > 0) out.byte(0x2c);
    n++;
    out.int(i);
  }
  out.ascii('],"resources":[');
  for (let i = 0; i < resourceNames.names.length; i++) {
    if (i > 0) out.byte(0x2c);
    out.int(i);
  }
  out.ascii("]}");
  Host.output(out.toBytes());
  return 0;
}
