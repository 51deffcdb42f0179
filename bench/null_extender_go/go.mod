module dra-quota-extender/bench/null_extender_go

go 1.24
