// A loaded checkpoint: immutable, shareable by any number of contexts and threads. Contexts
// hold their own reference, so it may be disposed once they are created.
using System;
using Kvtier.Native;

namespace Kvtier
{
    /// <summary>A loaded checkpoint. Dispose drops this reference (contexts hold their own);
    /// a Model never disposed is released by its finalizer.</summary>
    public sealed class Model : IDisposable
    {
        private readonly ModelHandle handle;

        private Model(ModelHandle h) { handle = h; }

        /// <summary>Loads an HF checkpoint directory or a GGUF file; throws KvtierException (NotFound, Corrupt, ...).</summary>
        public static Model Load(string directory)
        {
            if (directory == null) throw new KvtierException(1, "directory is null");
            SWIGTYPE_p_p_kvt_model box = kvtier.new_kvt_model_box();
            try
            {
                var err = new byte[1024];
                KvtierException.Check(kvtier.kvt_model_load(directory, box, err, err.Length),
                                       Library.CString(err));
                return new Model(new ModelHandle(kvtier.kvt_model_box_value(box)));
            }
            finally
            {
                kvtier.delete_kvt_model_box(box);
            }
        }

        /// <summary>Loads an HF checkpoint directory or a GGUF file, reporting its progress to progress (which
        /// may cancel it: KvtierException with Status.Cancelled).</summary>
        public static Model Load(string directory, ProgressCallback progress)
        {
            if (progress == null) return Load(directory);
            if (directory == null) throw new KvtierException(1, "directory is null");
            var call = new ProgressCall(progress);
            SWIGTYPE_p_p_kvt_model box = kvtier.new_kvt_model_box();
            try
            {
                var err = new byte[1024];
                int st = kvtier.kvt_model_load_with_progress(directory, call.FunctionPointer, IntPtr.Zero, box, err,
                                                             err.Length);
                GC.KeepAlive(call);
                call.Rethrow();
                KvtierException.Check(st, Library.CString(err));
                return new Model(new ModelHandle(kvtier.kvt_model_box_value(box)));
            }
            finally
            {
                kvtier.delete_kvt_model_box(box);
            }
        }

        /// <summary>The vocabulary size (token ids are 0 .. VocabSize - 1).</summary>
        public int VocabSize => handle.Use(m => kvtier.kvt_model_vocab_size(m));

        /// <summary>JSON summary: architecture, shapes, weight bytes, KV bytes per token, and
        /// "generation_defaults": the request defaults in force (generation_config.json).</summary>
        public string InfoJson() => handle.Use(m =>
        {
            var len = new int[1];
            KvtierException.Check(kvtier.kvt_model_info_json(m, new byte[1], 1, len), "info_json");
            var buf = new byte[len[0] + 1];
            KvtierException.Check(kvtier.kvt_model_info_json(m, buf, buf.Length, len), "info_json");
            return Library.CString(buf);
        });

        /// <summary>True when the checkpoint had a tokenizer.json (text in and out works).</summary>
        public bool HasTokenizer => handle.Use(m => kvtier.kvt_model_has_tokenizer(m) != 0);

        /// <summary>Encodes text into token ids (addSpecialTokens: what the tokenizer's template adds).</summary>
        public int[] Tokenize(string text, bool addSpecialTokens) => handle.Use(m =>
        {
            byte[] utf8 = System.Text.Encoding.UTF8.GetBytes(text);
            var len = new int[1];
            var err = new byte[1024];
            int special = addSpecialTokens ? 1 : 0;
            KvtierException.Check(kvtier.kvt_model_tokenize(m, utf8, utf8.Length, special, new int[0], 0, len, err, err.Length),
                                   Library.CString(err));
            var ids = new int[len[0]];
            KvtierException.Check(kvtier.kvt_model_tokenize(m, utf8, utf8.Length, special, ids, ids.Length, len, err, err.Length),
                                   Library.CString(err));
            return ids;
        });

        /// <summary>Decodes token ids into text.</summary>
        public string Detokenize(int[] ids, bool skipSpecialTokens) => handle.Use(m =>
        {
            var len = new int[1];
            var err = new byte[1024];
            int skip = skipSpecialTokens ? 1 : 0;
            KvtierException.Check(kvtier.kvt_model_detokenize(m, ids, ids.Length, skip, new byte[1], 1, len, err, err.Length),
                                   Library.CString(err));
            var buf = new byte[len[0] + 1];
            KvtierException.Check(kvtier.kvt_model_detokenize(m, ids, ids.Length, skip, buf, buf.Length, len, err, err.Length),
                                   Library.CString(err));
            return System.Text.Encoding.UTF8.GetString(buf, 0, len[0]);
        });

        /// <summary>The bytes a token adds to decoded text: a piece of UTF-8, or for a byte token
        /// part of a character the next tokens complete; a special token gives its text.</summary>
        public byte[] TokenBytes(int id) => handle.Use(m =>
        {
            var len = new int[1];
            KvtierException.Check(kvtier.kvt_model_token_bytes(m, id, new byte[0], 0, len), "token " + id);
            var buf = new byte[len[0] + 1];
            KvtierException.Check(kvtier.kvt_model_token_bytes(m, id, buf, buf.Length, len), "token " + id);
            Array.Resize(ref buf, len[0]);
            return buf;
        });

        /// <summary>Calls f with the native model, which stays alive during the call.</summary>
        internal T Use<T>(Func<SWIGTYPE_p_kvt_model, T> f) => handle.Use(f);

        /// <summary>Drops this reference to the model; contexts created on it keep theirs.
        /// Calling it again does nothing.</summary>
        public void Dispose() { handle.Dispose(); }
    }
}
