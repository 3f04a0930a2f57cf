// Host functions (capgate:plugin/host). Resolves only inside a component built by capgate-js.
export { log } from 'capgate:plugin/host@0.1.0';
