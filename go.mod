module github.com/pacer/pacer

go 1.26

require (
	github.com/redis/go-redis/v9 v9.7.3
	github.com/tidwall/redcon v1.6.2
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.27.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/tidwall/btree v1.1.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	go.uber.org/multierr v1.10.0 // indirect
)
