module github.com/kvtier/kvtier/bindings/go

go 1.19
