// state-probe (procedure): answers every call this instance has seen.

// Every marker this instance has been handed; a fresh instance answers
// {calls: 1, seen: [its own marker]}.
let calls = 0;
const seen = [];

function record(marker) {
  calls += 1;
  seen.push(marker === undefined ? null : marker);
  return { calls, seen: [...seen] };
}

export function invoke(call) {
  return record(call.input?.marker);
}
