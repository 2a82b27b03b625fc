module kvtier-example-go

go 1.19
