"""PDD decisions as pure functions of observable state, called by the simulator and the live router."""
