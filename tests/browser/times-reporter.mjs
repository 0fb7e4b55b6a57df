// A node:test reporter that writes one JSON line per finished top-level test ({name, seconds,
// status}), for scripts/test-times.py; used beside the spec reporter:
//   node --test --test-reporter=spec --test-reporter-destination=stdout \
//     --test-reporter=./times-reporter.mjs --test-reporter-destination=FILE ...
export default async function* timesReporter(source) {
  for await (const ev of source) {
    if ((ev.type === 'test:pass' || ev.type === 'test:fail') && ev.data.nesting === 0 && ev.data.details?.type !== 'suite') {
      const status = ev.type === 'test:fail' ? 'failed' : ev.data.skip !== undefined ? 'skipped' : 'ok';
      yield `${JSON.stringify({ name: ev.data.name, seconds: (ev.data.details?.duration_ms ?? 0) / 1000, status })}\n`;
    }
  }
}
