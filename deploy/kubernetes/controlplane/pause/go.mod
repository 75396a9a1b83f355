module fedpq.dev/controlplane/pause

go 1.26.0
