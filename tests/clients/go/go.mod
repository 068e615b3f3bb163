module countersink/tests/clients/go

go 1.22

require github.com/DataDog/datadog-go/v5 v5.9.1

require (
	github.com/Microsoft/go-winio v0.5.0 // indirect
	golang.org/x/sys v0.0.0-20210510120138-977fb7262007 // indirect
)
