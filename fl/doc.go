// Package fl is fedpq's round engine: who takes part in a round, the
// randomness each client and the server use, and federated training on top
// of it (sampling, dropout, ranges, streaming aggregation, the global update,
// checkpoints). The simulation and the server run the same code; only where
// secrets come from differs.
package fl
