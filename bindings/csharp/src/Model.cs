// A loaded checkpoint: immutable, shareable by any number of contexts and threads. Contexts
// hold their own reference, so it may be disposed once they are created.
using System;
using System.Runtime.InteropServices;
using Kvtier.Native;

namespace Kvtier
{
    /// <summary>Owns one native kvt_model reference; released exactly once.</summary>
    internal sealed class ModelHandle : SafeHandle
    {
        internal ModelHandle(IntPtr p) : base(IntPtr.Zero, true) { SetHandle(p); }
        public override bool IsInvalid => handle == IntPtr.Zero;
        internal SWIGTYPE_p_kvt_model Swig => new SWIGTYPE_p_kvt_model(handle, false);

        protected override bool ReleaseHandle()
        {
            kvtier.kvt_model_free(new SWIGTYPE_p_kvt_model(handle, false));
            return true;
        }
    }

    public sealed class Model : IDisposable
    {
        private readonly ModelHandle handle;

        private Model(ModelHandle h) { handle = h; }

        /// <summary>Loads an HF checkpoint directory; throws KvtierException (NotFound, Corrupt, ...).</summary>
        public static Model Load(string directory)
        {
            if (directory == null) throw new KvtierException(1, "directory is null");
            SWIGTYPE_p_p_kvt_model box = kvtier.new_kvt_model_box();
            try
            {
                var err = new byte[1024];
                KvtierException.Check(kvtier.kvt_model_load(directory, box, err, err.Length),
                                       Library.CString(err));
                SWIGTYPE_p_kvt_model m = kvtier.kvt_model_box_value(box);
                return new Model(new ModelHandle(SWIGTYPE_p_kvt_model.getCPtr(m).Handle));
            }
            finally
            {
                kvtier.delete_kvt_model_box(box);
            }
        }

        public int VocabSize => kvtier.kvt_model_vocab_size(Swig);

        /// <summary>JSON summary: architecture, shapes, weight bytes, KV bytes per token.</summary>
        public string InfoJson()
        {
            var len = new int[1];
            KvtierException.Check(kvtier.kvt_model_info_json(Swig, new byte[1], 1, len), "info_json");
            var buf = new byte[len[0] + 1];
            KvtierException.Check(kvtier.kvt_model_info_json(Swig, buf, buf.Length, len), "info_json");
            return Library.CString(buf);
        }

        /// <summary>True when the checkpoint had a tokenizer.json (text in and out works).</summary>
        public bool HasTokenizer => kvtier.kvt_model_has_tokenizer(Swig) != 0;

        /// <summary>Encodes text into token ids (addSpecialTokens: what the tokenizer's template adds).</summary>
        public int[] Tokenize(string text, bool addSpecialTokens)
        {
            byte[] utf8 = System.Text.Encoding.UTF8.GetBytes(text);
            var len = new int[1];
            var err = new byte[1024];
            int special = addSpecialTokens ? 1 : 0;
            KvtierException.Check(kvtier.kvt_model_tokenize(Swig, utf8, utf8.Length, special, new int[0], 0, len, err, err.Length),
                                   Library.CString(err));
            var ids = new int[len[0]];
            KvtierException.Check(kvtier.kvt_model_tokenize(Swig, utf8, utf8.Length, special, ids, ids.Length, len, err, err.Length),
                                   Library.CString(err));
            return ids;
        }

        /// <summary>Decodes token ids into text.</summary>
        public string Detokenize(int[] ids, bool skipSpecialTokens)
        {
            var len = new int[1];
            var err = new byte[1024];
            int skip = skipSpecialTokens ? 1 : 0;
            KvtierException.Check(kvtier.kvt_model_detokenize(Swig, ids, ids.Length, skip, new byte[1], 1, len, err, err.Length),
                                   Library.CString(err));
            var buf = new byte[len[0] + 1];
            KvtierException.Check(kvtier.kvt_model_detokenize(Swig, ids, ids.Length, skip, buf, buf.Length, len, err, err.Length),
                                   Library.CString(err));
            return System.Text.Encoding.UTF8.GetString(buf, 0, len[0]);
        }

        internal SWIGTYPE_p_kvt_model Swig
        {
            get
            {
                if (handle.IsClosed) throw new ObjectDisposedException("Model");
                return handle.Swig;
            }
        }

        public void Dispose() { handle.Dispose(); }
    }
}
