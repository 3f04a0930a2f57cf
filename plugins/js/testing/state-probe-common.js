// What every JavaScript state-probe plugin records: each marker its instance has been handed,
// in module globals; a fresh instance answers {calls: 1, seen: [its own marker]}.
let calls = 0;
const seen = [];

export function record(marker) {
  calls += 1;
  seen.push(marker === undefined ? null : marker);
  return { calls, seen: [...seen] };
}
