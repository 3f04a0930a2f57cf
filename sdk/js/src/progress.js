// Progress reports (capgate:plugin/progress), procedure-plugin world only.
export { report } from 'capgate:plugin/progress@0.1.0';
