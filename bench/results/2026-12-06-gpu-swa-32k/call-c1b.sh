rm -rf /tmp/r; BUDGET=200 CARRY=c1 . bench/results/device-call-prelude.sh; unset KVTIER_CUDA_MODULE; N=$C/new; export LD_LIBRARY_PATH=$N/lib:/usr/local/cuda/lib64
timeout 170 bash bench/results/2026-12-06-gpu-swa-32k/run.sh $N/bin/kvtier $R/swa 2>&1 | tee $R/swa.txt | cut -c1-400; rm -rf $R/swa/model/*.safetensors; tar czf $OUT/c1b.tgz -C /tmp r
