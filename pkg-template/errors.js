// The error classes of ferrolm, for `instanceof` checks. Every error the package throws is one of
// these (the engine's own errors are rebuilt as them at the wasm and worker boundaries); `name`
// is the class name, so `e.name === 'DownloadError'` works too.

export class FerrolmError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

const NAMES = [
  // Bad input from the caller.
  'InvalidOptionError', 'ContextOverflowError',
  // The model files.
  'ModelFormatError', 'UnsupportedModelError', 'TokenizerError', 'TemplateError',
  // Downloads and the cache (DownloadError has `status` for an HTTP error).
  'DownloadError', 'NetworkError', 'IntegrityError', 'CacheError', 'IoError',
  // The GPU.
  'NoAdapterError', 'GpuError', 'GpuLimitsError', 'DeviceLostError',
  // The engine's life.
  'EngineCrashedError', 'EngineUnloadedError', 'WorkerError',
];

const classes = {};
for (const n of NAMES) {
  // A named subclass per kind: `class InvalidOptionError extends FerrolmError {}` and so on.
  classes[n] = { [n]: class extends FerrolmError {} }[n];
}

export const {
  InvalidOptionError, ContextOverflowError, ModelFormatError, UnsupportedModelError, TokenizerError,
  TemplateError, DownloadError, NetworkError, IntegrityError, CacheError, IoError, NoAdapterError,
  GpuError, GpuLimitsError, DeviceLostError, EngineCrashedError, EngineUnloadedError, WorkerError,
} = classes;

/** An error of the class named `name` (a plain Error keeps that name for unknown ones, such as
 *  AbortError, which stays the DOMException-style name callers check). Extra own fields (e.g.
 *  `status`) are copied. */
export function typedError(name, message, fields, cause) {
  const C = classes[name];
  const e = C ? new C(message, cause ? { cause } : undefined) : Object.assign(new Error(message, cause ? { cause } : undefined), { name: name || 'Error' });
  if (fields) for (const [k, v] of Object.entries(fields)) if (!(k in Error.prototype) && k !== 'name' && k !== 'message' && k !== 'stack') e[k] = v;
  return e;
}

/** typedError without extra fields: `namedError('DownloadError', message, cause)`. */
export function namedError(name, message, cause) {
  return typedError(name, message, undefined, cause);
}

/** `e` as the class its name says (errors from the wasm module come as plain Errors). */
export function retype(e) {
  if (!(e instanceof Error) || e instanceof FerrolmError || !classes[e.name]) return e;
  const t = typedError(e.name, e.message, { ...e }, e.cause);
  t.stack = e.stack;
  return t;
}
