// state-probe (procedure): answers every call this instance has seen.
import { record } from '../state-probe-common.js';

export function invoke(call) {
  return record(call.input?.marker);
}
