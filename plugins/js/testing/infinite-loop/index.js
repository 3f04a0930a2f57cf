// Hostile: a policy that never returns. The host must stop it by its deadline (or fuel) and
// fail closed (POLICY_FAILED), and stay healthy.
export function evaluate(_request) {
  while (true) {}
}
