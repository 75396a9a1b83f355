// Package fl is fedpq's round engine: who takes part in a round, the
// randomness each client and the server use, and federated training on top
// of it (sampling, dropout, ranges, streaming aggregation, the global update,
// checkpoints). The simulation and the server run the same code; only where
// secrets come from differs.
//
// round.go reads a simulated round top to bottom: the server begins it
// (Engine.Begin: the clients, their ranges, their Pairing and the
// aggregate), the clients train and encode (encode.go; in a run with
// attackers, byzantine.go wraps encoding), and the server adds each upload
// (Plan.Add) and ends the round (Engine.End: the global update, the privacy
// ledger, the evaluation). A deployed server (package transport) drives the
// same Begin, Add and End with its clients' messages.
//
// async.go runs buffered asynchronous training (FedBuff) on the virtual
// clock of speed.go: each buffer of uploads is begun with
// Engine.BeginBuffer among its members and then added and ended as a
// round is, so a deployed asynchronous server can drive the same calls;
// staleness.go weighs its uploads.
package fl
