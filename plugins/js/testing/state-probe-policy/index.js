// state-probe (policy): denies with a code holding every call this instance has seen.
import { deny } from '@capgate/plugin-sdk';
import { record } from '../state-probe-common.js';

export function evaluate(request) {
  return deny({ code: JSON.stringify(record(request.inputValue('/marker'))) });
}
