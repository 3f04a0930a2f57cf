// state-probe (policy): denies with a code holding every call this instance has seen.
import { deny } from '@capgate/plugin-sdk';

// Every marker this instance has been handed; a fresh instance answers
// {calls: 1, seen: [its own marker]}.
let calls = 0;
const seen = [];

function record(marker) {
  calls += 1;
  seen.push(marker === undefined ? null : marker);
  return { calls, seen: [...seen] };
}

export function evaluate(request) {
  return deny({ code: JSON.stringify(record(request.inputValue('/marker'))) });
}
