package main

import (
	"fmt"
	"strings"
)

// notServed are the run settings of fedpq run that a server does not
// apply, and why: fedpq server offers no flag for them (its --help lists
// what it does), and refuses one given with the reason, rather than take
// it silently. In a --config file, dropout, shuffle, data and byzantine are refused
// where the run is set up; workers and client_column, which a run's YAML
// may share with fedpq run, change nothing on a server.
var notServed = map[string]string{
	"dropout":            "simulates clients that drop out; a server's clients drop out for real",
	"shuffle":            "runs in simulation only (fedpq run): a trusted shuffler is a party fedpq server does not have",
	"secure_sum_only":    "skips the protocol in a simulation (fedpq run); a server's clients run it",
	"data":               "is the clients' own data; in a deployment each client reads its own (fedpq client --data) and the server only its evaluation set (--test-data)",
	"client_column":      "names each row's client in the clients' data (--data), which a server does not read",
	"workers":            "is how many clients fedpq run trains in parallel; a server trains no client (each fedpq client trains its own)",
	"byzantine":          "makes simulated clients attack; in a deployment a client attacks by itself (fedpq client --byzantine), unknown to the server",
	"byzantine_fraction": "is how many simulated clients attack; in a deployment a client attacks by itself (fedpq client --byzantine), unknown to the server",
	"speed":              "drives a simulation's virtual clock (fedpq run); a server's clients take the time they take (fedpq client --delay makes stragglers for tests and demos)",
}

// refuseNotServed refuses a flag of args that names a setting of
// notServed, with the reason.
func refuseNotServed(args []string) error {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if why, ok := notServed[strings.ReplaceAll(name, "-", "_")]; ok {
			return badValue{fmt.Errorf("--%s: not a server setting: it %s", name, why)}
		}
	}
	return nil
}
